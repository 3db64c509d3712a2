"""Member pod watches: list + watch, relist on 410, unreachable members keep their figures."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Collection, Mapping
from typing import Any

import pytest

from karmadaquota.controller.members import Members, MemberWatch, cluster_access
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.kube.client import JSON, NotFound
from tests.controller.test_controller_pods import pod
from tests.fake_api import FakeApiServer, Ref
from tests.polling import until

PODS = "/api/v1/namespaces/team-a/pods"
NON_TERMINAL = "status.phase!=Succeeded,status.phase!=Failed"


def cluster(name: str = "member1", **spec: Any) -> JSON:
    body = {
        "apiEndpoint": f"https://{name}.example:6443",
        "syncMode": "Push",
        "secretRef": {"namespace": "karmada-cluster", "name": name},
    }
    body.update(spec)
    return {"metadata": {"name": name}, "spec": body}


def secret(token: str = "t0ken", ca: bytes = b"") -> JSON:
    data = {"token": base64.b64encode(token.encode()).decode()}
    if ca:
        data["caBundle"] = base64.b64encode(ca).decode()
    return {"data": data}


class Member:
    """A member cluster's kube-apiserver (a FakeApiServer holding its pods) and the clients
    the watch made for it (host, token, CA, insecure)."""

    def __init__(self) -> None:
        self.api = FakeApiServer()
        self.clients: list[tuple[str, str, bytes | None, bool]] = []
        self.lists: list[dict[str, str]] = []  # the parameters of every LIST of pods
        self.claim_lists: list[dict[str, str]] = []  # and of claims
        self.api.before_read = self._read

    def _read(self, verb: str, ref: Ref, params: Mapping[str, str]) -> None:
        if verb == "LIST" and ref.plural == "persistentvolumeclaims":
            self.claim_lists.append(dict(params))  # every claim counts, whatever its phase
            assert "fieldSelector" not in params, params
        elif verb == "LIST":
            self.lists.append(dict(params))
            # the watch lists only what may still run (the field selector every list carries)
            assert params.get("fieldSelector") == NON_TERMINAL, params

    def factory(self, host: str, token: str, ca: bytes | None, insecure: bool) -> Any:
        self.clients.append((host, token, ca, insecure))
        return self.api

    def add(self, *pods: JSON) -> None:
        for p in pods:
            self.api.create(f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p)


class Changes:
    def __init__(self) -> None:
        self.seen: list[Collection[str] | None] = []

    def __call__(self, namespaces: Collection[str] | None) -> None:
        self.seen.append(None if namespaces is None else set(namespaces))


@pytest.fixture
async def watch() -> AsyncIterator[tuple[MemberWatch, Member, Changes]]:
    member = Member()
    changes = Changes()

    async def secrets(ns: str, name: str) -> JSON:
        return secret("abc", b"PEM")

    w = MemberWatch(
        cluster_access(cluster()),
        secrets,
        changes,
        ControllerMetrics(),
        client_factory=member.factory,
        page_size=2,
        min_backoff=0.01,
        max_backoff=0.05,
    )
    tasks: list[asyncio.Task[None]] = []
    member.start = lambda: tasks.append(asyncio.create_task(w.run()))  # type: ignore[attr-defined]
    try:
        yield w, member, changes
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def pods_in(w: MemberWatch, ns: str = "team-a") -> str:
    return str(w.observed(ns, {"pods"}, (), time.time()).running.get("pods"))


async def test_lists_then_follows_the_watch(watch: Any) -> None:
    w, member, changes = watch
    member.add(pod("a"), pod("b"), pod("c", namespace="other"))  # 2 pages
    member.start()
    await until(lambda: w.synced)
    assert w.error == "" and pods_in(w) == "2" and pods_in(w, "other") == "1"
    # one client per informer (pods, claims), each from the Secret as it is
    assert member.clients == [("https://member1.example:6443", "abc", b"PEM", False)] * 2
    assert [p["fieldSelector"] for p in member.lists] == [NON_TERMINAL] * 2
    await until(lambda: member.api.watching("pods"))
    member.add(pod("d"))
    member.api.update(f"{PODS}/a", lambda o: o["status"].update(phase="Failed"))
    member.api.bookmark()
    team = lambda: set(w.table._by_ns.get("team-a", {}))  # noqa: E731
    await until(lambda: team() == {"uid-b", "uid-d"})
    assert pods_in(w) == "2" and len(w.table) == 3
    assert {"team-a"} in changes.seen


async def test_410_relists(watch: Any) -> None:
    w, member, _ = watch
    member.add(pod("a"))
    member.start()
    await until(lambda: w.synced and member.api.watching("pods"))
    member.api.hold("pods")
    member.add(pod("b"))  # never delivered by the watch
    member.api.compact()  # the watch answers 410 Gone
    await until(lambda: len(member.lists) >= 2 and pods_in(w) == "2")
    member.api.release("pods", deliver=False)
    assert w.error == ""


async def test_unreachable_member_keeps_figures_and_recovers(watch: Any) -> None:
    w, member, changes = watch
    member.add(pod("a"))
    member.start()
    await until(lambda: w.synced and member.api.watching("pods"))
    member.api.fail = OSError("connect: connection refused")
    member.api.end_watches()  # the connection drops; the next one is refused
    await until(lambda: "connection refused" in w.error)
    assert pods_in(w) == "1" and w.synced  # last figures kept
    assert None in changes.seen  # every quota's condition must be refreshed
    member.api.fail = None
    await until(lambda: w.error == "")


async def test_member_without_credentials_is_reported() -> None:
    changes = Changes()

    async def no_secret(ns: str, name: str) -> JSON:
        raise NotFound(404, "NotFound", f'secrets "{name}" not found')

    w = MemberWatch(
        cluster_access(cluster()), no_secret, changes, min_backoff=0.01, max_backoff=0.01
    )
    task = asyncio.create_task(w.run())
    try:
        await until(lambda: "not found" in w.error)
        assert not w.synced
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_secret_without_token_is_reported() -> None:
    async def empty(ns: str, name: str) -> JSON:
        return {"data": {}}

    w = MemberWatch(cluster_access(cluster()), empty, Changes(), min_backoff=0.01)
    task = asyncio.create_task(w.run())
    try:
        await until(lambda: "has no token" in w.error)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_pull_mode_cluster_cannot_be_observed() -> None:
    access = cluster_access({"metadata": {"name": "edge"}, "spec": {"syncMode": "Pull"}})
    assert "no apiEndpoint/secretRef" in access.problem
    assert cluster_access(cluster(insecureSkipTLSVerification=True)).insecure


async def test_members_restart_only_when_access_changes() -> None:
    member = Member()
    changes = Changes()

    async def secrets(ns: str, name: str) -> JSON:
        return secret()

    m = Members(secrets, changes, ControllerMetrics(), client_factory=member.factory)
    try:
        m.apply(cluster())
        first = m.get("member1")
        await until(lambda: first is not None and first.synced)
        m.apply(cluster())  # a status update: same access
        assert m.get("member1") is first
        m.apply(cluster(apiEndpoint="https://moved:6443"))
        assert m.get("member1") is not first
        m.apply(cluster("member2"))
        assert [v.name for v in m.views()] == ["member1", "member2"]
        m.remove("member1")
        assert [v.name for v in m.views()] == ["member2"]
        assert changes.seen.count(None) >= 3
    finally:
        await m.close()


async def test_disabled_members_are_known_but_not_watched() -> None:
    member = Member()
    m = Members(
        lambda ns, n: None,
        Changes(),
        enabled=False,  # type: ignore[arg-type,return-value]
        client_factory=member.factory,
    )
    m.apply(cluster())
    assert [v.name for v in m.views()] == ["member1"] and not m.views()[0].synced
    assert member.clients == []
    await m.close()


async def test_claims_are_watched_beside_the_pods(watch: Any) -> None:
    from tests.controller.test_controller_claims import claim

    w, member, changes = watch
    member.add(pod("a"))
    member.api.create("/api/v1/namespaces/team-a/persistentvolumeclaims", claim("data-0"))
    member.start()
    await until(lambda: w.synced and member.api.watching("persistentvolumeclaims"))
    names = {"pods", "persistentvolumeclaims", "requests.storage"}

    def held() -> dict[str, str]:
        return {n: str(q) for n, q in w.observed("team-a", names, (), time.time()).running.items()}

    assert held() == {"pods": "1", "persistentvolumeclaims": "1", "requests.storage": "1Gi"}
    assert member.claim_lists == [{"limit": "2"}]
    changes.seen.clear()
    member.api.create("/api/v1/namespaces/team-a/persistentvolumeclaims", claim("data-1", "2Gi"))
    await until(lambda: held()["persistentvolumeclaims"] == "2")
    assert held()["requests.storage"] == "3Gi" and {"team-a"} in changes.seen
    member.api.delete("/api/v1/namespaces/team-a/persistentvolumeclaims/data-0")
    await until(
        lambda: held() == {"pods": "1", "persistentvolumeclaims": "1", "requests.storage": "2Gi"}
    )


async def test_a_member_whose_claims_cannot_be_listed_still_counts_its_pods(watch: Any) -> None:
    from karmadaquota.kube.client import KubeError

    w, member, changes = watch
    member.add(pod("a"))
    member.api.refuse["persistentvolumeclaims"] = KubeError(
        403, "Forbidden", "persistentvolumeclaims is forbidden"
    )
    member.start()
    await until(lambda: w.synced, what="observed without its claims")
    await until(lambda: "persistentvolumeclaims: " in w.error)
    assert "forbidden" in w.error and pods_in(w) == "1"
    assert None in changes.seen  # every quota's MemberObserved condition says so
    member.api.refuse.clear()
    await until(lambda: w.error == "", what="the claims listed at last")
