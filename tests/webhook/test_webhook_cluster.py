"""The webhook with ClusterKarmadaQuotas, against the one fake API server: selection from its
namespace informer (failing closed), one writer per quota object, exact under concurrency
across namespaces and replicas, the tighter of a namespaced and a cluster quota wins, and a
refusal by one object takes back what the others reserved."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from karmadaquota.api import ClusterKarmadaQuota
from karmadaquota.evaluate import Decision
from karmadaquota.kube import paths
from karmadaquota.kube.client import JSON, KubeError
from karmadaquota.kube.namespace_labels import NamespaceLabels
from karmadaquota.webhook import review as review_mod
from karmadaquota.webhook.backend import KubeQuotaBackend
from karmadaquota.webhook.batcher import Batcher
from karmadaquota.webhook.cluster import ClusterQuotas, cluster_store
from karmadaquota.webhook.handlers import Webhook
from karmadaquota.webhook.metrics import WebhookMetrics
from karmadaquota.webhook.routes import build_app
from tests.fake_api import FakeApiServer, Replica, quota_doc
from tests.polling import until
from tests.webhook.test_webhook_app import (
    OVERRIDES,
    TENANT,
    _sum,
    override_policy,
    post,
    review,
)
from tests.webhook_fakes import binding_doc

CKQ = "team-a"
NAMESPACES = [f"a-{i}" for i in range(5)]


def add_namespace(api: FakeApiServer, name: str, **labels: str) -> None:
    api.create("/api/v1/namespaces", {"metadata": {"name": name, "labels": labels}})


def add_cluster_quota(api: FakeApiServer, hard: dict[str, str], name: str = CKQ) -> JSON:
    """A cluster quota as the controller left it: `used` zero for every name."""
    return api.create(
        paths.cluster_quotas(),
        {
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "ClusterKarmadaQuota",
            "metadata": {"name": name},
            "spec": {"hard": hard, "namespaceSelector": {"matchLabels": {"team": "a"}}},
            "status": {"hard": hard, "used": dict.fromkeys(hard, "0")},
        },
    )


def stored(api: FakeApiServer, name: str = CKQ) -> ClusterKarmadaQuota:
    return ClusterKarmadaQuota.model_validate(api.get_object(paths.cluster_quota(name)))


def pods_pending(quota: Any) -> int:
    return sum(int(r.reserved.get("pods", 0)) for r in quota.status.reservations)


@contextlib.asynccontextmanager
async def replica(api: FakeApiServer, store: Replica | None = None) -> AsyncIterator[Webhook]:
    """One webhook replica: its own informers, caches and batchers over the shared server."""
    store = store or Replica(api=api)
    store.refresh()
    ckqs = cluster_store(api)
    labels = NamespaceLabels(api)
    cluster = ClusterQuotas(
        ckqs, labels, Batcher(KubeQuotaBackend(api, ckqs, cluster=True), model=ClusterKarmadaQuota)
    )
    task = asyncio.create_task(cluster.run())
    webhook = Webhook(store.quota_store(), Batcher(store), WebhookMetrics(), cluster=cluster)
    try:
        await until(cluster.synced, what="cluster quotas and namespaces listed")
        yield webhook
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await cluster.close()
        await webhook.batcher.close()


async def admit(webhook: Webhook, ns: str, name: str, replicas: int = 1) -> Decision:
    doc = binding_doc(name, replicas=replicas, namespace=ns, uid=f"uid-{ns}-{name}")
    req = review_mod.parse(json.dumps(review(doc)).encode())
    return await webhook.admit_binding(req)


@pytest.fixture
def api() -> FakeApiServer:
    api = FakeApiServer(rv=100)
    for ns in NAMESPACES:
        add_namespace(api, ns, team="a")
    add_namespace(api, "b", team="b")
    return api


async def test_a_cluster_quota_refuses_in_kubernetes_words_and_records_the_namespace(
    api: FakeApiServer,
) -> None:
    add_cluster_quota(api, {"pods": "3"})
    async with replica(api) as webhook:
        assert (await admit(webhook, "a-0", "web", replicas=2)).allowed
        assert (await admit(webhook, "a-1", "web", replicas=1)).allowed
        refused = await admit(webhook, "a-2", "web", replicas=1)
        assert not refused.allowed
        assert refused.message == (
            "exceeded quota: team-a, requested: pods=1, used: pods=3, limited: pods=3"
        )
        assert refused.quota == ""  # no namespaced quota's waiting list records it
        assert (await admit(webhook, "b", "web", replicas=50)).allowed  # not selected
    quota = stored(api)
    assert [(r.reservedBy.namespace, r.reservedBy.uid) for r in quota.status.reservations] == [
        ("a-0", "uid-a-0-web"),
        ("a-1", "uid-a-1-web"),
    ]
    wire = api.get_object(paths.cluster_quota(CKQ))["status"]["pending"]
    assert [g["namespace"] for g in wire] == ["a-0", "a-1"]


async def test_an_unseen_namespace_or_an_unsynced_table_fails_closed(api: FakeApiServer) -> None:
    add_cluster_quota(api, {"pods": "3"})
    async with replica(api) as webhook:
        api.hold("namespaces")  # its watch does not deliver the new namespace yet
        add_namespace(api, "a-new", team="a")
        d = await admit(webhook, "a-new", "web", replicas=1)
        assert not d.allowed and "not seen yet" in d.message and "try again" in d.message
        api.release("namespaces")
        assert webhook.cluster is not None
        # a broken namespace watch: every review a cluster quota may concern fails closed
        # until the namespaces are listed again
        api.refuse["/namespaces"] = KubeError(500, "InternalError", "etcd is slow")
        api.compact()  # the watches end 410 Gone: the list again fails
        await until(lambda: webhook.cluster is not None and webhook.cluster.labels.stale)
        d = await admit(webhook, "a-0", "web", replicas=1)
        assert not d.allowed and "reconnecting" in d.message
        del api.refuse["/namespaces"]
        await until(lambda: webhook.cluster is not None and not webhook.cluster.labels.stale)
        assert (await admit(webhook, "a-0", "web-2", replicas=1)).allowed
        assert webhook.cluster is not None
        webhook.cluster.labels.synced.clear()
        d = await admit(webhook, "a-0", "web-3", replicas=1)
        assert not d.allowed and "not synced" in d.message
    assert [r.reservedBy.name for r in stored(api).status.reservations] == ["web-2"]


async def test_a_storm_across_namespaces_and_two_replicas_admits_exactly_the_room(
    api: FakeApiServer,
) -> None:
    """48 creates in flight over 5 namespaces, 2 replicas, one cluster quota of 20 pods."""
    add_cluster_quota(api, {"pods": "20"})
    async with replica(api) as one, replica(api) as two:
        jobs = [
            admit((one, two)[i % 2], NAMESPACES[i % 5], f"web-{i}", replicas=1) for i in range(48)
        ]
        decisions = await asyncio.gather(*jobs)
    admitted = sum(d.allowed for d in decisions)
    assert admitted == 20
    assert pods_pending(stored(api)) == 20
    refusals = [d.message for d in decisions if not d.allowed]
    assert all(m.startswith("exceeded quota: team-a,") for m in refusals), refusals[:3]
    # one writer per object per replica: every namespace's reviews batched into few writes
    assert api.puts < 48


@pytest.mark.parametrize(("namespaced", "cluster", "room"), [(3, 10, 3), (10, 2, 2)])
async def test_the_tighter_of_a_namespaced_and_a_cluster_quota_wins(
    api: FakeApiServer, namespaced: int, cluster: int, room: int
) -> None:
    store = Replica(api=api)
    store.seed(quota_doc("kq", namespace="a-0", hard={"pods": str(namespaced)}, used={"pods": "0"}))
    add_cluster_quota(api, {"pods": str(cluster)})
    async with replica(api, store) as webhook:
        decisions = await asyncio.gather(
            *(admit(webhook, "a-0", f"web-{i}", replicas=1) for i in range(6))
        )
        assert sum(d.allowed for d in decisions) == room
        refused = next(d for d in decisions if not d.allowed)
        tighter = "kq" if namespaced < cluster else CKQ
        assert refused.message.startswith(f"exceeded quota: {tighter},")
        # what the looser object reserved for a refused review is taken back by its writer
        # before the refusal is answered
        assert pods_pending(stored(api)) == room
        assert pods_pending(api.quota("a-0", "kq")) == room
    admitted = {f"uid-a-0-web-{i}" for i, d in enumerate(decisions) if d.allowed}
    assert {r.reservedBy.uid for r in stored(api).status.reservations} == admitted
    assert {r.reservedBy.uid for r in api.quota("a-0", "kq").status.reservations} == admitted


async def test_a_refusal_is_answered_once_what_the_looser_object_reserved_is_gone(
    api: FakeApiServer,
) -> None:
    """One review at a time: the caller told 'no' by the namespaced quota finds the cluster
    quota's room free at once, and so does the next review on another replica."""
    store = Replica(api=api)
    store.seed(quota_doc("kq", namespace="a-0", hard={"pods": "1"}, used={"pods": "0"}))
    add_cluster_quota(api, {"pods": "2"})
    async with replica(api, store) as one, replica(api) as two:
        assert (await admit(one, "a-0", "web-0")).allowed
        refused = await admit(one, "a-0", "web-1")
        assert refused.message.startswith("exceeded quota: kq,"), refused.message
        assert pods_pending(stored(api)) == 1  # already taken back
        assert (await admit(two, "a-1", "web-2")).allowed  # the last pod of the cluster quota


async def test_a_refusal_from_a_stale_copy_is_confirmed_live(api: FakeApiServer) -> None:
    """A replica whose watch has not delivered the room another writer gave back (the
    controller releasing a deleted binding, another replica taking back a refused review's
    reservation) reads the quota live before refusing, and admits what fits; what does not
    fit is still refused, in the live quota's figures."""
    add_cluster_quota(api, {"pods": "3"})
    async with replica(api) as webhook:
        assert (await admit(webhook, "a-0", "web-0", replicas=3)).allowed
        api.hold("clusterkarmadaquotas")  # this replica's copy keeps the 3 pods pending

        def released(obj: JSON) -> None:
            obj["status"].pop("pending", None)

        api.update(paths.cluster_quota(CKQ), released, generation=False)
        gets = api.calls["GET clusterkarmadaquotas"]
        assert (await admit(webhook, "a-1", "web-1", replicas=2)).allowed
        # one live read, for the refusal it found stale
        assert api.calls["GET clusterkarmadaquotas"] == gets + 1
        refused = await admit(webhook, "a-2", "web-2", replicas=2)
        assert refused.message == (
            "exceeded quota: team-a, requested: pods=2, used: pods=2, limited: pods=3"
        )
    assert [r.reservedBy.name for r in stored(api).status.reservations] == ["web-1"]


async def test_dry_run_reserves_nothing_in_a_cluster_quota(api: FakeApiServer) -> None:
    add_cluster_quota(api, {"pods": "1"})
    async with replica(api) as webhook:
        doc = binding_doc("web", replicas=1, namespace="a-0", uid="uid-dry")
        req = review_mod.parse(json.dumps(review(doc, dry_run=True)).encode())
        assert (await webhook.admit_binding(req)).allowed
        big = binding_doc("big", replicas=2, namespace="a-0", uid="uid-big")
        req = review_mod.parse(json.dumps(review(big, dry_run=True)).encode())
        assert not (await webhook.admit_binding(req)).allowed
    assert stored(api).status.reservations == []


async def test_a_namespace_only_a_cluster_quota_selects_is_enforced_for_tenants(
    api: FakeApiServer,
) -> None:
    """Trusted writers and charged overrides (issue 29) apply where a cluster quota selects
    the namespace, with no KarmadaQuota of its own."""
    add_cluster_quota(api, {"pods": "10"})
    async with replica(api) as webhook:
        doc = binding_doc("web", replicas=1, namespace="a-0", uid="uid-t")
        req = review_mod.parse(json.dumps(review(doc, user=TENANT)).encode())
        refused = await webhook.admit_binding(req)
        assert not refused.allowed and "forbidden" in refused.message
        policy = override_policy("/spec/replicas")
        policy["metadata"]["namespace"] = "a-0"
        req = review_mod.parse(json.dumps(review(policy, resource=OVERRIDES, user=TENANT)).encode())
        assert not (await webhook.admit_override(req)).allowed
        policy["metadata"]["namespace"] = "b"  # not selected: not ours
        req = review_mod.parse(json.dumps(review(policy, resource=OVERRIDES, user=TENANT)).encode())
        assert (await webhook.admit_override(req)).allowed


class SlowClusterWrites(KubeQuotaBackend):
    """A cluster quota backend whose every status write takes 100 s of API time (counted)."""

    async def put_status(self, quota: JSON) -> JSON:
        result = await super().put_status(quota)
        name = quota["metadata"]["name"]
        self.api_seconds[name] = self.api_seconds.get(name, 0.0) + 100.0
        return result


async def test_a_reviews_own_share_excludes_its_cluster_quotas_api_time(
    api: FakeApiServer,
) -> None:
    """A review in a namespace a cluster quota selects waits on that quota's writer too: the
    100 s its write took is API time, not the webhook's own (it was counted as own before)."""
    add_cluster_quota(api, {"pods": "3"})
    store = Replica(api=api)
    store.refresh()
    ckqs = cluster_store(api)
    backend = SlowClusterWrites(api, ckqs, cluster=True)
    cluster = ClusterQuotas(
        ckqs, NamespaceLabels(api), Batcher(backend, model=ClusterKarmadaQuota), backend.api_seconds
    )
    task = asyncio.create_task(cluster.run())
    webhook = Webhook(store.quota_store(), Batcher(store), WebhookMetrics(), cluster=cluster)
    try:
        await until(cluster.synced, what="cluster quotas and namespaces listed")
        async with TestClient(TestServer(build_app(webhook))) as client:
            doc = binding_doc("web", namespace="a-0", uid="uid-web")
            status, body = await post(client, "/validate-resourcebinding", review(doc))
            assert status == 200 and body["response"]["allowed"] is True
            text = await (await client.get("/metrics")).text()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await cluster.close()
        await webhook.batcher.close()
    assert set(backend.api_seconds) == {CKQ} and backend.api_seconds[CKQ] >= 100.0
    assert pods_pending(stored(api)) == 1
    assert _sum(text, "karmadaquota_admission_duration_seconds") > 0
    assert _sum(text, "karmadaquota_admission_own_duration_seconds") == 0
