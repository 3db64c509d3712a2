"""The guarantee with a ClusterKarmadaQuota, as invariants over generated histories (hypothesis).

Three namespaces, two selected by one cluster quota (and the first also holding a namespaced
KarmadaQuota), two webhook replicas (each its own caches, namespace informer and batchers over
the fake API server with real compare-and-swap) admitting concurrent creates across namespaces
through the real admission path, bindings deleted, a namespace relabelled out (its usage
leaves) or, empty, back in; the real controller runs all along on the fake's watches.

After every step:
- Σ charges of the live bindings of the selected namespaces ≤ the cluster quota's hard, and of
  the first namespace ≤ its own quota's (the tighter wins);
- what was admitted is what gets stored (a refusal by any object is final).

Whenever the controller has settled: the cluster quota's `used` is Σ charges of the live
bindings of the namespaces it selects now, `namespaces[]` says where, and no pending charge of
a binding it has observed is left.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karmadaquota.api import ClusterKarmadaQuota
from karmadaquota.controller.leader import AlwaysLeader
from karmadaquota.controller.manager import Controller
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.reconciler import ReconcilerConfig
from karmadaquota.kube import paths
from karmadaquota.kube.client import JSON
from karmadaquota.kube.namespace_labels import NamespaceLabels
from karmadaquota.kube.retry import Backoff
from karmadaquota.webhook.backend import KubeQuotaBackend
from karmadaquota.webhook.batcher import Batcher, BatcherConfig
from karmadaquota.webhook.cluster import ClusterQuotas, cluster_store
from karmadaquota.webhook.handlers import Webhook
from karmadaquota.webhook.metrics import WebhookMetrics
from tests.fake_api import FakeApiServer, Replica, quota_doc
from tests.polling import until
from tests.webhook.test_webhook_cluster import add_cluster_quota, add_namespace, admit
from tests.webhook_fakes import binding_doc

NAMESPACES = ["a-0", "a-1", "a-2"]
CLUSTER_HARD = 5
NAMESPACED_HARD = 3  # a-0's own quota


@dataclass(frozen=True)
class Create:
    ns: int
    replicas: int


@dataclass(frozen=True)
class Delete:
    pick: int


@dataclass(frozen=True)
class Relabel:
    ns: int


OPS = st.one_of(
    st.builds(Create, st.integers(0, 2), st.integers(1, 3)),
    st.builds(Create, st.integers(0, 1), st.integers(1, 3)),
    st.builds(Delete, st.integers(0, 1000)),
    st.builds(Relabel, st.integers(1, 2)),
)
STEPS = st.lists(st.lists(OPS, min_size=1, max_size=6), min_size=1, max_size=6)


@asynccontextmanager
async def replica(api: FakeApiServer, store: Replica) -> AsyncIterator[Webhook]:
    no_wait = BatcherConfig(conflict_backoff=Backoff(0.0, 0.0))
    ckqs = cluster_store(api)
    cluster = ClusterQuotas(
        ckqs,
        NamespaceLabels(api),
        Batcher(KubeQuotaBackend(api, ckqs, cluster=True), no_wait, model=ClusterKarmadaQuota),
    )
    task = asyncio.create_task(cluster.run())
    webhook = Webhook(
        store.quota_store(), Batcher(store, no_wait), WebhookMetrics(), cluster=cluster
    )
    try:
        await until(cluster.synced)
        yield webhook
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await cluster.close()
        await webhook.batcher.close()


# a fold of pending charges waits this long (ReconcilerConfig): admissions meet waiting folds
FOLD_DELAY = 0.02


def controller(api: FakeApiServer) -> Controller:
    return Controller(
        api,
        ControllerMetrics(),
        AlwaysLeader(),
        ReconcilerConfig(
            quiet=0.0,
            max_delay=0.0,
            conflict_backoff=Backoff(0.0, 0.0),
            max_attempts=20,
            page_size=2,
            member_watch=False,
            resync_period=None,
            fold_delay=FOLD_DELAY,
            tenant_views=False,
        ),
        namespace_api=api,
    )


def live(api: FakeApiServer, namespaces: list[str]) -> int:
    """Σ replicas (1 pod each) of the stored bindings of `namespaces`."""
    return sum(
        int(b["spec"]["replicas"]) for (ns, _), b in api.bindings.items() if ns in namespaces
    )


def selected(api: FakeApiServer) -> list[str]:
    return [
        ns
        for ns in NAMESPACES
        if (api.get_object(f"/api/v1/namespaces/{ns}")["metadata"].get("labels") or {}).get("team")
        == "a"
    ]


async def run(history: list[list[Create | Delete | Relabel]]) -> None:
    api = FakeApiServer(rv=100)
    add_namespace(api, "a-0", team="a")
    add_namespace(api, "a-1", team="a")
    add_namespace(api, "a-2")
    store = Replica(api=api)
    store.seed(
        quota_doc("kq", namespace="a-0", hard={"pods": str(NAMESPACED_HARD)}, used={"pods": "0"})
    )
    add_cluster_quota(api, {"pods": str(CLUSTER_HARD)})
    c = controller(api)
    assert c.enforcement is not None
    informers = [
        asyncio.create_task(i.run())
        for i in (
            c.binding_informer,
            c.quotas.informer,
            c.cluster_quotas.informer,
            c.enforcement.informer,
        )
    ]
    queues = asyncio.create_task(c.run_queues())
    counter = 0
    try:
        async with replica(api, store) as one, replica(api, store) as two:
            for step in history:
                jobs = []
                for op in step:
                    if isinstance(op, Create):
                        counter += 1
                        ns = NAMESPACES[op.ns]
                        webhook = (one, two)[counter % 2]
                        name = f"b{counter}"
                        jobs.append((ns, name, op.replicas, admit(webhook, ns, name, op.replicas)))
                    elif isinstance(op, Delete) and api.bindings:
                        keys = sorted(api.bindings)
                        ns, name = keys[op.pick % len(keys)]
                        api.delete_binding(ns, name)
                    elif isinstance(op, Relabel):
                        ns = NAMESPACES[op.ns]
                        if ns in selected(api):
                            api.update(f"/api/v1/namespaces/{ns}", _label(None))
                        elif live(api, [ns]) == 0:  # only an empty one comes back in here
                            api.update(f"/api/v1/namespaces/{ns}", _label("a"))
                        else:
                            continue
                        want = ns in selected(api)
                        for w in (one, two):  # the webhook's table follows within its watch
                            assert w.cluster is not None
                            await until(functools.partial(_sees, w, ns, want))
                decisions = await asyncio.gather(*(j for *_, j in jobs))
                for (ns, name, replicas, _), d in zip(jobs, decisions, strict=True):
                    if d.allowed:  # the API server stores what admission allowed
                        uid = f"uid-{ns}-{name}"
                        api.put_binding(binding_doc(name, replicas, namespace=ns, uid=uid))
                chosen = selected(api)
                assert live(api, chosen) <= CLUSTER_HARD, (chosen, api.bindings.keys())
                assert live(api, ["a-0"]) <= NAMESPACED_HARD
            await until(lambda: c.idle() and api.watching("resourcebindings"), timeout=10)
            await until(lambda: settled(api), timeout=10, what="the controller agrees")
    finally:
        for t in [*informers, queues]:
            t.cancel()
        await asyncio.gather(*informers, queues, return_exceptions=True)


def _sees(webhook: Webhook, ns: str, selected: bool) -> bool:
    """The replica's namespace table shows the relabel."""
    assert webhook.cluster is not None
    labels = webhook.cluster.labels.get(ns) or {}
    return labels.get("team") == ("a" if selected else None)


def _label(value: str | None) -> Callable[[JSON], None]:
    def change(doc: JSON) -> None:
        labels = doc["metadata"].setdefault("labels", {})
        if value is None:
            labels.pop("team", None)
        else:
            labels["team"] = value

    return change


def settled(api: FakeApiServer) -> bool:
    quota = ClusterKarmadaQuota.model_validate(api.get_object(paths.cluster_quota("team-a")))
    chosen = selected(api)
    want = live(api, chosen)
    per_ns = {u.namespace: int(u.used["pods"]) for u in quota.status.namespaces}
    return (
        quota.status.used.get("pods") == str(want)
        and per_ns == {ns: live(api, [ns]) for ns in chosen if live(api, [ns])}
        and not quota.status.reservations
    )


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(STEPS)
def test_nothing_over_admits_across_namespaces_and_the_controller_agrees(
    history: list[list[Create | Delete | Relabel]],
) -> None:
    asyncio.run(run(history))
