"""Observed claims (issue 42's leftover): the PersistentVolumeClaims a member holds count in
`used` as Kubernetes' own quota counts them — the claims a StatefulSet's scale-down retained
(`persistentVolumeClaimRetentionPolicy.whenScaled: Retain`, the default) stay counted until they
are deleted in the member, and a claim a live replica is charged for and the member holds counts
once. Pure (claim usage, the table, the recompute), then the controller against the fake API
server with a member watched through its real informers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from karmadaquota.api import KarmadaQuota
from karmadaquota.controller.claims import ClaimTable, claim_usage
from karmadaquota.controller.index import BindingIndex, Interner, observe
from karmadaquota.controller.manager import Controller
from karmadaquota.controller.members import Members
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.recompute import NamespaceSnapshot, recompute
from karmadaquota.controller.reconciler import ReconcilerConfig
from karmadaquota.kube.client import JSON
from karmadaquota.kube.templates import TemplateStore
from karmadaquota.scopes import Expression
from tests.conftest import NOW, as_strings, quota, raw_binding
from tests.controller.test_controller_pods import pod
from tests.controller.test_controller_recompute import member
from tests.controller.test_controller_reconciler import (
    NS,
    Lead,
    add_quota,
    controlling,
    listed,
    used,
)
from tests.fake_api import FakeApiServer
from tests.polling import until

FAST = "fast.storageclass.storage.k8s.io/"
HARD = {
    "persistentvolumeclaims": "2",
    "count/persistentvolumeclaims": "2",
    "requests.storage": "2Gi",
    FAST + "persistentvolumeclaims": "2",
    FAST + "requests.storage": "2Gi",
    "pods": "10",
}
KEY = ("apps", "StatefulSet", NS, "db")


def claim(
    name: str,
    storage: str = "1Gi",
    *,
    namespace: str = NS,
    klass: str | None = "fast",
    allocated: str | None = None,
    beta_class: str | None = None,
    phase: str = "Pending",
) -> JSON:
    """A PersistentVolumeClaim as a member's StatefulSet controller makes it."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage}},
    }
    if klass is not None:
        spec["storageClassName"] = klass
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if beta_class is not None:
        meta["annotations"] = {"volume.beta.kubernetes.io/storage-class": beta_class}
    status: dict[str, Any] = {"phase": phase}
    if allocated is not None:
        status["allocatedResources"] = {"storage": allocated}
    return {"metadata": meta, "spec": spec, "status": status}


# ---- what one claim is charged (Kubernetes' PVC evaluator) -----------------------------------


def test_a_claim_is_charged_as_kubernetes_charges_it() -> None:
    assert as_strings(claim_usage(claim("a", "1Gi"))) == {
        "persistentvolumeclaims": "1",
        "count/persistentvolumeclaims": "1",
        "requests.storage": "1Gi",
        FAST + "persistentvolumeclaims": "1",
        FAST + "requests.storage": "1Gi",
    }
    # no class: the class names are not charged
    assert as_strings(claim_usage(claim("b", "500Mi", klass=None))) == {
        "persistentvolumeclaims": "1",
        "count/persistentvolumeclaims": "1",
        "requests.storage": "500Mi",
    }
    # the beta annotation wins over spec.storageClassName (GetPersistentVolumeClaimClass)
    slow = claim_usage(claim("c", beta_class="slow"))
    assert "slow.storageclass.storage.k8s.io/requests.storage" in slow
    assert FAST + "requests.storage" not in slow
    # a volume expanded past the request counts its allocation (RecoverVolumeExpansionFailure)
    grown = claim_usage(claim("d", "1Gi", allocated="2Gi"))
    assert str(grown["requests.storage"]) == "2Gi"
    assert str(claim_usage(claim("e", "2Gi", allocated="1Gi"))["requests.storage"]) == "2Gi"
    # whole bytes, rounded up (kubernetes/kubernetes#94313)
    assert claim_usage(claim("f", "1500m"))["requests.storage"].nanos == 2 * 10**9


def test_the_table_counts_every_claim_of_the_namespace_for_unscoped_quotas_only() -> None:
    table = ClaimTable()
    deleting = claim("b")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"  # pvc-protection
    for c in (claim("a"), deleting, claim("c", namespace="other"), claim("d", phase="Lost")):
        table.apply("ADDED", c)
    names = ["persistentvolumeclaims", "requests.storage", "pods", "count/deployments.apps"]
    got = as_strings(table.observed(NS, names, ()))
    # being deleted or lost, a claim exists and Kubernetes' quota counts it; pods are not ours
    assert got == {"persistentvolumeclaims": "3", "requests.storage": "3Gi"}
    assert as_strings(table.observed("quiet", names, ())) == {
        "persistentvolumeclaims": "0",
        "requests.storage": "0",
    }
    # a scope never matches a claim (a scoped quota cannot track claim names anyway)
    assert table.observed(NS, names, (Expression("BestEffort", "Exists"),)) == {}
    assert table.apply("DELETED", claim("a")) == NS
    assert table.apply("DELETED", claim("a")) is None
    assert as_strings(table.observed(NS, ["persistentvolumeclaims"], ())) == {
        "persistentvolumeclaims": "2"
    }


# ---- the recompute: max(what is charged, what the member holds) per member ------------------


def stateful_set(replicas: int, rv: int, storage: str = "1Gi") -> JSON:
    """The template: `replicas` of one container, one claim template of `storage` (class fast)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS, "uid": "uid-db", "resourceVersion": str(rv)},
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "storageClassName": "fast",
                        "resources": {"requests": {"storage": storage}},
                    },
                }
            ],
        },
    }


def binding_of(replicas: int, rv: int, clusters: dict[str, int]) -> JSON:
    """Karmada's binding of the StatefulSet at template version `rv`."""
    doc = raw_binding(
        "db",
        namespace=NS,
        kind="StatefulSet",
        replicas=replicas,
        requests={"cpu": "1"},
        clusters=clusters,
        rv=rv,
        uid="rb-db",
    )
    doc["spec"]["resource"]["resourceVersion"] = str(rv)
    return doc


def index_with(store: TemplateStore, *docs: JSON) -> BindingIndex:
    index = BindingIndex()
    intern = Interner()
    for doc in docs:
        state = observe(doc, intern, store)
        assert not state.waiting
        index.apply(state)
    return index


async def test_retained_claims_count_until_deleted_and_a_live_replicas_claim_counts_once() -> None:
    store = TemplateStore()
    store.put(KEY, stateful_set(2, 5))
    m1 = await member("member1", claims=[claim("data-db-0"), claim("data-db-1")])
    q = quota(name="q", namespace=NS, hard=HARD)

    def status(index: BindingIndex) -> dict[str, str]:
        out = recompute(q, NamespaceSnapshot(index.bindings(NS), members=[m1]), NOW)
        return out.status.used

    # two replicas, two claims in member1: each claim is a replica's, counted once
    two = index_with(store, binding_of(2, 5, {"member1": 2}))
    assert status(two)["persistentvolumeclaims"] == "2"
    assert status(two)[FAST + "requests.storage"] == "2Gi"
    # scaled down to 1 (Retain): the binding is charged 1 claim, the member holds 2
    store.put(KEY, stateful_set(1, 6))
    one = index_with(store, binding_of(1, 6, {"member1": 1}))
    assert status(one) == {
        "persistentvolumeclaims": "2",
        "count/persistentvolumeclaims": "2",
        "requests.storage": "2Gi",
        FAST + "persistentvolumeclaims": "2",
        FAST + "requests.storage": "2Gi",
        "pods": "1",
    }
    out = recompute(q, NamespaceSnapshot(one.bindings(NS), members=[m1]), NOW)
    by = {c.clusterName: c for c in out.status.aggregatedStatus}
    assert by["member1"].used is not None and by["member1"].used["persistentvolumeclaims"] == "1"
    assert by["member1"].observed is not None
    assert by["member1"].observed["persistentvolumeclaims"] == "2"
    conds = {c.type: c for c in out.status.conditions}
    assert conds["OutOfBandUsage"].status == "True"
    assert "member1: " in conds["OutOfBandUsage"].message
    assert "persistentvolumeclaims=1" in conds["OutOfBandUsage"].message
    # the retained claim deleted in the member: released
    api = await m1.api()
    assert isinstance(api, FakeApiServer)
    api.delete(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/data-db-1")
    await m1.claim_informer.relist(api)
    assert status(one)["persistentvolumeclaims"] == "1"
    assert status(one)["requests.storage"] == "1Gi"


async def test_claims_held_where_nothing_is_placed_count_and_scoped_quotas_ignore_them() -> None:
    # a StatefulSet deleted with whenDeleted: Retain (or moved to another member) leaves its
    # claims behind: nothing is placed there any more, all of them count
    m1 = await member("member1", claims=[claim("data-old-0"), claim("data-old-1", "3Gi")])
    q = quota(
        name="q", namespace=NS, hard={"persistentvolumeclaims": "5", "requests.storage": "9Gi"}
    )
    out = recompute(q, NamespaceSnapshot({}, members=[m1]), NOW)
    assert out.status.used == {"persistentvolumeclaims": "2", "requests.storage": "4Gi"}
    # a member whose claims are not known yet counts nothing of them (what is not seen)
    m2 = await member("member2", claims=[claim("x")], synced=False)
    out = recompute(q, NamespaceSnapshot({}, members=[m2]), NOW)
    assert out.status.used == {"persistentvolumeclaims": "0", "requests.storage": "0"}


# ---- the controller: the member watched, the status written ----------------------------------


@pytest.fixture
async def env() -> AsyncIterator[tuple[FakeApiServer, Controller, FakeApiServer, TemplateStore]]:
    api = FakeApiServer()
    member_api = FakeApiServer()  # member1's kube-apiserver: its pods and claims
    store = TemplateStore(api)  # fed by the test (`put`), as its informer would

    async def secrets(ns: str, name: str) -> JSON:
        return {"data": {"token": "dG9rZW4="}}

    members = Members(secrets, client_factory=lambda *_: member_api)
    c = Controller(
        api,
        ControllerMetrics(),
        Lead(),
        ReconcilerConfig(quiet=0.01, max_delay=0.1, member_watch=True),
        members=members,
        templates=store,
    )
    members.on_change = c.member_changed
    async with controlling(c):
        members.apply(
            {
                "metadata": {"name": "member1"},
                "spec": {
                    "apiEndpoint": "https://member1",
                    "secretRef": {"namespace": "karmada-cluster", "name": "member1"},
                },
            }
        )
        try:
            yield api, c, member_api, store
        finally:
            await members.close()


PVCS = f"/api/v1/namespaces/{NS}/persistentvolumeclaims"


async def test_the_controller_keeps_retained_claims_in_used_until_the_member_deletes_them(
    env: Any,
) -> None:
    api, c, member_api, store = env
    add_quota(api, "q", HARD, spec={"memberEnforcement": "None"})
    store.put(KEY, stateful_set(2, 5))
    api.put_binding(binding_of(2, 5, {"member1": 2}))
    await listed(c)
    await until(lambda: used(api).get("persistentvolumeclaims") == "2", what="charged 2")
    # the member's StatefulSet controller makes the two replicas' claims and pods
    for n in ("data-db-0", "data-db-1"):
        member_api.create(PVCS, claim(n))
    for n in ("db-0", "db-1"):
        member_api.create(f"/api/v1/namespaces/{NS}/pods", pod(n))
    watch = c.members.get("member1")
    await until(lambda: watch is not None and len(watch.claims) == 2, what="claims seen")
    await until(lambda: _observed(api).get("persistentvolumeclaims") == "2", what="observed")
    assert used(api)["persistentvolumeclaims"] == "2"  # the replicas' claims count once
    assert used(api)["requests.storage"] == "2Gi"

    # scaled down to 1: pod db-1 goes, its claim stays (whenScaled: Retain)
    store.put(KEY, stateful_set(1, 6))
    api.put_binding(binding_of(1, 6, {"member1": 1}))
    member_api.delete(f"/api/v1/namespaces/{NS}/pods/db-1")
    await until(lambda: used(api).get("pods") == "1", what="the scale-down recomputed")
    await until(lambda: c.api.drained() and c.idle(), what="quiet")
    assert used(api)["persistentvolumeclaims"] == "2"
    assert used(api)["requests.storage"] == "2Gi"
    assert used(api)[FAST + "requests.storage"] == "2Gi"
    placed = {x["clusterName"]: x for x in api.quotas[(NS, "q")]["status"]["aggregatedStatus"]}
    assert placed["member1"]["used"]["persistentvolumeclaims"] == "1"

    # the tenant deletes the retained claim in the member: released
    member_api.delete(f"{PVCS}/data-db-1")
    await until(lambda: used(api).get("persistentvolumeclaims") == "1", what="released")
    assert used(api)["requests.storage"] == "1Gi"
    assert used(api)["count/persistentvolumeclaims"] == "1"


def _observed(api: FakeApiServer) -> dict[str, str]:
    q = KarmadaQuota.model_validate(api.quotas[(NS, "q")])
    for c in q.status.aggregatedStatus:
        if c.clusterName == "member1" and c.observed is not None:
            return dict(c.observed)
    return {}


async def test_the_guards_cover_the_claims_a_member_keeps_before_sharing_the_rest() -> None:
    """Guarded: claims member1 retained (nothing of them placed any more) are what it holds, so
    its guard covers them first and the others share only what is left — without them counted,
    the 2 claims of headroom would be shared out and member2 could make a third."""
    from karmadaquota.controller.guard_keeper import GuardKeeper
    from karmadaquota.quantity import NANO
    from tests.fake_members import Fleet

    api = FakeApiServer()
    names = ["member1", "member2", "member3"]
    fleet = Fleet(names, {"persistentvolumeclaims": 2 * NANO})
    members = fleet.registry()
    for w in members.views():
        w._synced = w._claims_settled = True  # the watches are played by the test
    c = Controller(
        api,
        ControllerMetrics(),
        Lead(),
        ReconcilerConfig(quiet=0.01, max_delay=0.1, member_watch=True),
        members=members,
        guards=GuardKeeper(members, poll=0.0),
    )

    def guards() -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for m in names:
            g = fleet.guard(m, NS, "q")
            out[m] = None if g is None else g["spec"]["hard"]["persistentvolumeclaims"]
        return out

    async with controlling(c):
        add_quota(api, "q", {"persistentvolumeclaims": "2"})  # guarded: the default
        await listed(c)
        await until(lambda: all(v is not None for v in guards().values()), what="guards")
        one = members.get("member1")
        assert one is not None
        for n in ("data-db-0", "data-db-1"):
            one.claims.apply("ADDED", claim(n))
        c.member_changed([NS])
        await until(lambda: used(api).get("persistentvolumeclaims") == "2", what="counted")
        await until(lambda: guards() == {"member1": "2", "member2": "0", "member3": "0"})
        # one deleted in member1: its share is handed out again
        one.claims.apply("DELETED", claim("data-db-1"))
        c.member_changed([NS])
        await until(lambda: used(api).get("persistentvolumeclaims") == "1", what="released")
        await until(lambda: sum(int(v or 0) for v in guards().values()) == 2)
        assert int(guards()["member1"] or 0) >= 1
    assert fleet.worst["persistentvolumeclaims"] <= 2 * NANO
