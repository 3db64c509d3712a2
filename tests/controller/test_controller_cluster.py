"""The controller's ClusterKarmadaQuota recompute against the fake API server, fed by its real
informers: usage summed over the selected namespaces, membership following labels, pending
charges dropped once observed, the delete-here/recreate-there juggle, enforcement labels."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from karmadaquota.api import ClusterKarmadaQuota, ObjectReference, Reservation
from karmadaquota.controller.cluster import ClusterSnapshot, recompute_cluster
from karmadaquota.controller.manager import Controller
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.reconciler import ReconcilerConfig
from karmadaquota.kube import paths
from karmadaquota.kube.client import JSON
from karmadaquota.times import format_time
from tests.conftest import NOW, raw_binding
from tests.controller.test_controller_pods import pod
from tests.controller.test_controller_recompute import index_of, member
from tests.controller.test_controller_reconciler import Lead, controlling
from tests.fake_api import FakeApiServer
from tests.polling import until

CKQ = "team-a"
ENFORCED = {"quota.karmada.io/enforced": "true"}


def add_namespace(api: FakeApiServer, name: str, **labels: str) -> None:
    api.create("/api/v1/namespaces", {"metadata": {"name": name, "labels": labels}})


def relabel(api: FakeApiServer, name: str, **labels: str | None) -> None:
    def change(ns: JSON) -> None:
        have = ns["metadata"].setdefault("labels", {})
        for k, v in labels.items():
            if v is None:
                have.pop(k, None)
            else:
                have[k] = v

    api.update(f"/api/v1/namespaces/{name}", change)


def add_cluster_quota(api: FakeApiServer, hard: Mapping[str, str], **spec: Any) -> JSON:
    body = {"hard": dict(hard), "namespaceSelector": {"matchLabels": {"team": "a"}}, **spec}
    return api.create(
        paths.cluster_quotas(),
        {
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "ClusterKarmadaQuota",
            "metadata": {"name": CKQ},
            "spec": body,
        },
    )


def add_binding(api: FakeApiServer, ns: str, name: str, **kw: Any) -> JSON:
    kw.setdefault("uid", f"uid-{ns}-{name}")  # uids are unique across namespaces
    return api.put_binding(raw_binding(name, namespace=ns, **kw))


def stored(api: FakeApiServer) -> JSON:
    return api.get_object(paths.cluster_quota(CKQ))


def status(api: FakeApiServer) -> dict[str, Any]:
    return dict(stored(api).get("status") or {})


def used(api: FakeApiServer) -> dict[str, str]:
    return dict(status(api).get("used") or {})


@pytest.fixture
async def env() -> AsyncIterator[tuple[FakeApiServer, Controller]]:
    api = FakeApiServer(rv=100)
    async with running(api, Lead()) as c:
        yield api, c


@contextlib.asynccontextmanager
async def running(api: FakeApiServer, lead: Lead) -> AsyncIterator[Controller]:
    """A controller over `api` with its informers and queues running."""
    c = Controller(
        api,
        ControllerMetrics(),
        lead,
        ReconcilerConfig(
            quiet=0.01, max_delay=0.1, page_size=2, member_watch=False, view_delay=0.2
        ),
        namespace_api=api,
    )
    assert c.enforcement is not None and c.views is not None
    async with controlling(c):
        tasks = [
            asyncio.create_task(i.run())
            for i in (
                c.binding_informer,
                c.quotas.informer,
                c.cluster_quotas.informer,
                c.enforcement.informer,
                c.views.informer,
            )
        ]
        try:
            yield c
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_used_is_the_sum_over_the_selected_namespaces(env: Any) -> None:
    api, c = env
    add_namespace(api, "a-dev", team="a")
    add_namespace(api, "a-prod", team="a")
    add_namespace(api, "a-idle", team="a")
    add_namespace(api, "b", team="b")
    add_binding(api, "a-dev", "web", replicas=2, clusters={"m1": 2})
    add_binding(api, "a-prod", "web", replicas=3, clusters={"m1": 1, "m2": 2})
    add_binding(api, "b", "web", replicas=5)  # not selected: never counted
    add_cluster_quota(api, {"pods": "10", "requests.cpu": "20"})
    await until(lambda: used(api) == {"pods": "5", "requests.cpu": "5"}, what="Σ over a-*")
    s = status(api)
    assert s["hard"] == {"pods": "10", "requests.cpu": "20"}
    assert s["summary"] == "pods: 5/10, requests.cpu: 5/20"
    assert s["selectedNamespaces"] == 3
    # compact: only namespaces with usage
    assert s["namespaces"] == [
        {"namespace": "a-dev", "used": {"pods": "2", "requests.cpu": "2"}},
        {"namespace": "a-prod", "used": {"pods": "3", "requests.cpu": "3"}},
    ]
    by_cluster = {a["clusterName"]: a["used"] for a in s["aggregatedStatus"]}
    assert by_cluster == {
        "m1": {"pods": "3", "requests.cpu": "3"},
        "m2": {"pods": "2", "requests.cpu": "2"},
    }
    # every selected namespace carries the webhook's label; the unselected one does not
    for ns in ("a-dev", "a-prod", "a-idle"):
        await until(
            lambda ns=ns: (
                ENFORCED.items()
                <= (api.get_object(f"/api/v1/namespaces/{ns}")["metadata"]["labels"]).items()
            )
        )
    assert (
        "quota.karmada.io/enforced"
        not in api.get_object("/api/v1/namespaces/b")["metadata"]["labels"]
    )
    await until(
        lambda: any(
            c["type"] == "Enforced" and c["status"] == "True"
            for c in status(api).get("conditions", [])
        )
    )
    assert "waiting" not in status(api) and "queued" not in status(api)
    # the quota gauges carry it, with quota_namespace "" (cluster-scoped)
    sample = c.metrics.registry.get_sample_value(
        "karmadaquota_quota_used", {"quota_namespace": "", "quota": CKQ, "resource": "pods"}
    )
    assert sample == 5.0


async def test_a_label_flip_recomputes_a_cluster_quota_only_when_all_labelled_moves() -> None:
    """At a cold start the leader labels 5,000 namespaces one by one: each flip recomputed the
    cluster quota of its namespace (100 namespaces: 100 recomputes where the last one alone
    moves its `Enforced`). A follower here: the test labels the namespaces itself."""
    api = FakeApiServer(rv=100)
    names = [f"a-{i}" for i in range(4)]
    for ns in names:
        add_namespace(api, ns, team="a")
    add_cluster_quota(api, {"pods": "10"})
    async with running(api, Lead(leader=False)) as c:
        assert c.enforcement is not None
        enforcement = c.enforcement
        await until(lambda: c.selection.of(CKQ) == frozenset(names), what="selected")
        await until(c.cluster_dirty.idle, what="the first recompute done")
        before = c.cluster_dirty.flushes
        for ns in names[:-1]:
            relabel(api, ns, **ENFORCED)
            await until(lambda ns=ns: enforcement.enforced(ns), what=f"{ns} seen labelled")
            await until(c.cluster_dirty.idle)
            assert c.cluster_dirty.flushes == before, f"recomputed after {ns}'s label"
        relabel(api, names[-1], **ENFORCED)  # the last one: every namespace is labelled
        await until(lambda: c.cluster_dirty.flushes == before + 1, what="recomputed once")
        relabel(api, names[0], **{"quota.karmada.io/enforced": None})  # one is not any more
        await until(lambda: c.cluster_dirty.flushes == before + 2, what="recomputed again")


async def test_relabelling_moves_usage_within_two_seconds(env: Any) -> None:
    api, _ = env
    add_namespace(api, "a-dev", team="a")
    add_namespace(api, "other")
    add_binding(api, "a-dev", "web", replicas=2)
    add_binding(api, "other", "big", replicas=4)
    add_cluster_quota(api, {"pods": "5"})
    await until(lambda: used(api) == {"pods": "2"})
    started = time.monotonic()
    relabel(api, "other", team="a")  # in: its usage comes with it, over hard (nothing evicted)
    await until(lambda: used(api) == {"pods": "6"}, timeout=2.0, what="relabel in")
    assert time.monotonic() - started < 2.0
    assert status(api)["summary"] == "pods: 6/5"
    started = time.monotonic()
    relabel(api, "a-dev", team=None)  # out: its usage leaves
    await until(lambda: used(api) == {"pods": "4"}, timeout=2.0, what="relabel out")
    assert [n["namespace"] for n in status(api)["namespaces"]] == ["other"]
    assert status(api)["selectedNamespaces"] == 1


async def test_deleting_and_recreating_a_namespace_spends_nothing_twice(env: Any) -> None:
    """Capsule #1662: a claim juggled between namespaces was spent twice. Bindings are keyed by
    uid: what is deleted leaves, a namespace recreated under the same name counts only what
    exists in it now."""
    api, _ = env
    add_namespace(api, "a-1", team="a")
    add_namespace(api, "a-2", team="a")
    add_cluster_quota(api, {"pods": "10"})
    for round_ in range(3):
        add_binding(api, "a-1", "web", replicas=3, uid=f"u1-{round_}")
        await until(lambda: used(api) == {"pods": "3"}, what="created in a-1")
        api.delete_binding("a-1", "web-deployment")
        api.delete("/api/v1/namespaces/a-1")
        add_binding(api, "a-2", "web", replicas=3, uid=f"u2-{round_}")
        await until(lambda: used(api) == {"pods": "3"}, what="moved to a-2")
        add_namespace(api, "a-1", team="a")  # recreated, same name, empty
        api.delete_binding("a-2", "web-deployment")
        await until(lambda: used(api) == {"pods": "0"}, what="all gone")
    assert status(api)["selectedNamespaces"] == 2


async def test_pending_charges_are_dropped_once_observed_even_out_of_selection(env: Any) -> None:
    api, _ = env
    add_namespace(api, "a-1", team="a")
    add_namespace(api, "a-2", team="a")
    add_cluster_quota(api, {"pods": "10"})
    await until(lambda: used(api) == {"pods": "0"})

    def reserve(q: JSON) -> None:
        quota = ClusterKarmadaQuota.model_validate(q)
        expires = format_time(datetime.now(UTC) + timedelta(seconds=60))
        for ns in ("a-1", "a-2"):
            quota.status.reservations.append(
                Reservation(
                    reservedBy=ObjectReference(
                        apiVersion="work.karmada.io/v1alpha2",
                        kind="ResourceBinding",
                        name="web",
                        namespace=ns,
                        uid=f"uid-{ns}",
                    ),
                    reserved={"pods": "2"},
                    expirationTime=expires,
                    generation=1,
                )
            )
        q["status"] = quota.status.model_dump(mode="json", exclude_none=True)

    api.update(paths.cluster_quota(CKQ), reserve, generation=False)
    assert [g["namespace"] for g in status(api)["pending"]] == ["a-1", "a-2"]
    relabel(api, "a-2", team=None)  # its binding appears after it left the selection
    add_binding(api, "a-1", "web", replicas=2, uid="uid-a-1")
    add_binding(api, "a-2", "web", replicas=2, uid="uid-a-2")
    await until(lambda: not status(api).get("pending"), what="both observed and dropped")
    assert used(api) == {"pods": "2"}


async def test_a_spec_a_cluster_quota_cannot_have_is_invalid_and_charges_nothing(
    env: Any,
) -> None:
    api, _ = env
    add_namespace(api, "a-1", team="a")
    add_binding(api, "a-1", "web", replicas=2)
    add_cluster_quota(api, {"pods": "10"}, onExceed="Queue")
    await until(lambda: any(c["type"] == "Valid" for c in status(api).get("conditions", [])))
    valid = next(c for c in status(api)["conditions"] if c["type"] == "Valid")
    assert valid["status"] == "False" and "spec.onExceed" in valid["message"]
    assert not used(api)  # no used: the webhook refuses what it would charge (fail closed)


def view(api: FakeApiServer, ns: str) -> JSON | None:
    return api.objects(VIEWS).get((ns, CKQ))


VIEWS = ("/apis/quota.karmada.io/v1alpha1", "appliedclusterkarmadaquotas")


async def test_each_selected_namespace_gets_a_view_with_totals_and_only_its_own_usage(
    env: Any,
) -> None:
    """What a tenant with namespaced read rights sees (OpenShift's
    AppliedClusterResourceQuota): the totals and its namespace's usage, not the others'."""
    api, _ = env
    add_namespace(api, "a-dev", team="a")
    add_namespace(api, "a-prod", team="a")
    add_namespace(api, "b", team="b")
    add_binding(api, "a-dev", "web", replicas=2)
    add_binding(api, "a-prod", "web", replicas=3)
    add_cluster_quota(api, {"pods": "10"})
    await until(lambda: view(api, "a-dev") is not None and view(api, "a-prod") is not None)
    await until(lambda: (view(api, "a-dev") or {})["status"]["used"] == {"pods": "5"})
    dev = view(api, "a-dev")
    assert dev is not None
    assert dev["status"] == {
        "clusterQuota": CKQ,
        "hard": {"pods": "10"},
        "used": {"pods": "5"},
        "namespaceUsed": {"pods": "2"},
        "summary": "pods: 5/10",
        "namespaceSummary": "pods: 2",
        "selectedNamespaces": 2,
    }
    assert "a-prod" not in str(dev)  # nothing of the other namespace but the count
    assert dev["metadata"]["ownerReferences"][0]["kind"] == "ClusterKarmadaQuota"
    assert view(api, "b") is None
    relabel(api, "a-prod", team=None)  # out of the selection: its view goes
    await until(lambda: view(api, "a-prod") is None, timeout=3.0)
    await until(lambda: (view(api, "a-dev") or {})["status"]["used"] == {"pods": "2"})


async def test_a_views_totals_wait_while_its_namespaces_own_usage_is_written_at_once(
    env: Any,
) -> None:
    """A change in one namespace moves every view's totals: its own view is written within
    `view_delay`, the others' totals at most every `view_totals_delay` (3 s here) — a cluster
    quota of 100 namespaces no longer rewrites 100 views for each admission."""
    api, c = env
    assert c.views is not None
    c.views.totals_delay = 3.0
    add_namespace(api, "a-dev", team="a")
    add_namespace(api, "a-prod", team="a")
    add_binding(api, "a-dev", "web", replicas=2)
    add_cluster_quota(api, {"pods": "10"})
    await until(lambda: (view(api, "a-prod") or {}).get("status", {}).get("used") == {"pods": "2"})
    writes = c.views.writes
    add_binding(api, "a-dev", "api", replicas=1)
    await until(lambda: (view(api, "a-dev") or {})["status"]["namespaceUsed"] == {"pods": "3"})
    await until(lambda: c.views.queue.idle())
    assert (view(api, "a-prod") or {})["status"]["used"] == {"pods": "2"}  # its totals wait
    assert c.views.writes == writes + 1
    await until(lambda: (view(api, "a-prod") or {})["status"]["used"] == {"pods": "3"}, timeout=8.0)
    assert c.views.writes == writes + 2


def _pending_entry(ns: str, uid: str, pods: str, generation: int, ttl: float) -> Reservation:
    return Reservation(
        reservedBy=ObjectReference(
            apiVersion="work.karmada.io/v1alpha2",
            kind="ResourceBinding",
            name="web",
            namespace=ns,
            uid=uid,
        ),
        reserved={"pods": pods},
        expirationTime=format_time(datetime.now(UTC) + timedelta(seconds=ttl)),
        generation=generation,
    )


async def test_an_update_admitted_but_never_stored_is_released_from_a_cluster_quota(
    env: Any,
) -> None:
    """The leak CI saw after a webhook replica was killed mid-storm: a replica wrote its
    pending charge of a binding's UPDATE (generation 3) into a ClusterKarmadaQuota, and the
    UPDATE was never stored (the binding stays at generation 1). The orphan audit disproves it
    once a GET after the admission window still finds generation 1 — in the cluster quota as in
    a namespaced one — and the recompute's write releases it; not before the window."""
    api, c = env
    c.config.admission_window = 0.5
    add_namespace(api, "a-1", team="a")
    add_cluster_quota(api, {"pods": "10"})
    add_binding(api, "a-1", "web", replicas=2, uid="uid-web")
    await until(lambda: used(api) == {"pods": "2"})

    def reserve(q: JSON) -> None:
        quota = ClusterKarmadaQuota.model_validate(q)
        quota.status.reservations.append(_pending_entry("a-1", "uid-web", "3", 3, 600))
        q["status"] = quota.status.model_dump(mode="json", exclude_none=True)

    api.update(paths.cluster_quota(CKQ), reserve, generation=False)
    seen = asyncio.get_running_loop().time()
    assert status(api).get("pending")
    await until(lambda: not status(api).get("pending"), timeout=5, what="the stale charge released")
    assert asyncio.get_running_loop().time() - seen >= 1.5  # window + the second it rounds to
    assert used(api) == {"pods": "2"}
    released = c.metrics.registry.get_sample_value(
        "karmadaquota_reservations_released_total", {"reason": "disproved"}
    )
    assert released == 1


async def test_a_disproved_charge_is_forgotten_once_released(env: Any) -> None:
    """The proof covers the entries the audit saw, not their key for ever: once the write has
    released them, the same entry written again (a new admission) waits out its own window."""
    api, c = env
    c.config.admission_window = 0.5
    add_namespace(api, "a-1", team="a")
    add_cluster_quota(api, {"pods": "10"})
    add_binding(api, "a-1", "web", replicas=2, uid="uid-web")
    await until(lambda: used(api) == {"pods": "2"})
    entry = _pending_entry("a-1", "uid-web", "3", 3, 600)

    def reserve(q: JSON) -> None:
        quota = ClusterKarmadaQuota.model_validate(q)
        quota.status.reservations.append(entry)
        q["status"] = quota.status.model_dump(mode="json", exclude_none=True)

    api.update(paths.cluster_quota(CKQ), reserve, generation=False)
    await until(lambda: not status(api).get("pending"), timeout=5, what="the stale charge released")
    await until(lambda: not c.audit.disproved("", CKQ), what="the proof forgotten")
    api.update(paths.cluster_quota(CKQ), reserve, generation=False)
    again = asyncio.get_running_loop().time()
    await until(lambda: not status(api).get("pending"), timeout=5, what="released again")
    assert asyncio.get_running_loop().time() - again >= 1.5


async def test_a_cluster_quota_counts_terminating_pods_of_every_selected_namespace() -> None:
    # docs/charging.md: used = Σ charges + per member (terminating + running past placement),
    # the member's pods summed over the selected namespaces; a namespace not selected is not
    # counted
    def terminating(name: str, namespace: str) -> JSON:
        p = pod(name, namespace=namespace)
        p["metadata"]["deletionTimestamp"] = format_time(NOW + timedelta(seconds=30))
        p["metadata"]["deletionGracePeriodSeconds"] = 30
        return p

    m1 = await member("member1", pod("b-1", namespace="b"))
    m1.table.apply("MODIFIED", terminating("old-a", "a"))
    m1.table.apply("MODIFIED", terminating("old-b", "b"))
    m1.table.apply("MODIFIED", terminating("elsewhere", "c"))
    index = index_of(
        raw_binding("x", namespace="b", uid="ub", replicas=1, clusters={"member1": 1}),
        raw_binding("y", namespace="a", uid="ua", replicas=1, clusters={"member1": 1}),
    )
    api = FakeApiServer()
    add_cluster_quota(api, {"pods": "10"})
    quota = ClusterKarmadaQuota.model_validate(stored(api))
    snapshot = ClusterSnapshot(selected=["a", "b"], bindings=index.bindings, members=[m1])
    out = recompute_cluster(quota, snapshot, NOW)
    # charges 2, two terminating pods; b's running pod is within the 2 placed on member1
    assert out.status.used["pods"] == "4"
