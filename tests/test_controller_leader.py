"""Lease leader election: create, renew, take over only after expiry, release, never two."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from karmadaquota.controller.leader import LeaderElector, lease_path
from karmadaquota.kube.client import JSON, Conflict, NotFound


class FakeLeases:
    """An API server holding Leases, with resourceVersion compare-and-swap."""

    def __init__(self) -> None:
        self.objects: dict[str, JSON] = {}
        self.rv = 0
        self.fail = False
        self.namespaces = {"karmada-system"}

    async def request(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> JSON:
        if self.fail:
            raise OSError("connection refused")
        if method == "GET":
            if path not in self.objects:
                raise NotFound(404, "NotFound", path)
            return copy.deepcopy(self.objects[path])
        assert body is not None
        meta = body["metadata"]
        if method == "POST":
            if meta["namespace"] not in self.namespaces:
                raise NotFound(404, "NotFound", "namespace")
            key = f"{path}/{meta['name']}"
            if key in self.objects:
                raise Conflict(409, "AlreadyExists", key)
            return self._store(key, body)
        assert method == "PUT"
        current = self.objects.get(path)
        if current is None:
            raise NotFound(404, "NotFound", path)
        if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", path)
        return self._store(path, body)

    def _store(self, key: str, body: JSON) -> JSON:
        self.rv += 1
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[key] = obj
        return copy.deepcopy(obj)

    def holder(self) -> str:
        obj = self.objects.get(lease_path("karmada-system", "karmadaquota-controller"), {})
        return str(obj.get("spec", {}).get("holderIdentity", ""))


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(api: FakeLeases, clock: Clock, holder: str, **kw: Any) -> LeaderElector:
    changes: list[bool] = []
    e = LeaderElector(
        api, "karmada-system", holder=holder, clock=clock, on_change=changes.append, **kw
    )
    e.changes = changes  # type: ignore[attr-defined]
    return e


async def test_first_replica_creates_the_lease_and_leads() -> None:
    api, clock = FakeLeases(), Clock()
    a = elector(api, clock, "a")
    assert await a.try_acquire_or_renew()
    assert a.is_leader() and api.holder() == "a"
    spec = next(iter(api.objects.values()))["spec"]
    assert spec["leaseDurationSeconds"] == 10 and spec["leaseTransitions"] == 0


async def test_follower_waits_for_the_lease_to_lapse_then_takes_over() -> None:
    api, clock = FakeLeases(), Clock()
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
    assert api.holder() == "b"
    assert next(iter(api.objects.values()))["spec"]["leaseTransitions"] == 1


async def test_leader_stops_before_anyone_else_can_start() -> None:
    """Even with renewals failing, a's leadership ends before b may take over."""
    api, clock = FakeLeases(), Clock()
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
    api, clock = FakeLeases(), Clock()
    a = elector(api, clock, "a")
    assert await a.try_acquire_or_renew()
    api.fail = True
    clock.t += 6.9
    assert a.is_leader()
    clock.t += 0.2
    assert not a.is_leader()


async def test_release_lets_a_follower_in_at_once() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert await a.try_acquire_or_renew()
    a._notify()
    assert not await b.try_acquire_or_renew()
    await a.release()
    assert not a.is_leader() and a.changes == [True, False]  # type: ignore[attr-defined]
    assert api.holder() == ""
    assert await b.try_acquire_or_renew()


async def test_concurrent_update_loses_the_cas() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.try_acquire_or_renew()
    await a.release()
    # b read the released lease, but a renews it first: b's PUT conflicts
    original = api.request
    calls = 0

    async def racing(method: str, path: str, body: JSON | None = None, **kw: Any) -> JSON:
        nonlocal calls
        calls += 1
        result = await original(method, path, body, **kw)
        if method == "GET" and calls == 1:
            await a.try_acquire_or_renew()
        return result

    api.request = racing  # type: ignore[method-assign]
    assert not await b.try_acquire_or_renew()
    assert api.holder() == "a"


async def test_missing_namespace_is_reported_not_raised() -> None:
    api, clock = FakeLeases(), Clock()
    e = LeaderElector(api, "nowhere", holder="a", clock=clock)
    assert not await e.try_acquire_or_renew()


def test_deadline_must_leave_room() -> None:
    with pytest.raises(ValueError):
        LeaderElector(FakeLeases(), "ns", lease_duration=5, renew_deadline=4, request_timeout=2)
