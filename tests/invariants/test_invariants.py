"""The hard guarantee as invariants over generated histories (hypothesis).

A history is a sequence of steps against one namespace with three quotas (unscoped, a
PriorityClass scope, BestEffort). In each step two webhook replicas (each its own batcher and
cache over the fake API server with real resourceVersion compare-and-swap) admit concurrent
creates, updates (scale up/down, placement changes, components) and dry-runs through the real
admission path, bindings are deleted, another writer may win the next status writes, an old
leader's late write may get in before the controller's. The real controller
(`manager.Controller`) runs all along on the fake's lists and watches: every create, update
and delete reaches it by watch, a step may make it recompute every quota at once, or relist
(the watch history is compacted: 410 Gone); its writes are its own JSON patches and PUTs, with
their re-read after a lost compare-and-swap. Bindings that existed before the webhook was
installed, with hostile values (negative requests and replica counts, huge ones), are there
from the start.

After every step:
- Σ charges of the live bindings ≤ hard, for every quota and resource (or no more than the
  pre-existing bindings alone held, which the webhook never admitted);
- a request the batcher denied at any point (first pass or re-check after a conflict) was
  finally denied: a retry never admits what was denied. A first pass evaluated on a cached
  copy the live read of a refusing quota found stale is not a denial: the batch is evaluated
  again on the fresh copy, and that is its first pass;
- no `used` (global or per cluster) is ever negative;
- the controller never loses its write more than twice against one stored version (after a
  lost write it computes the next from the version its watch delivered, else reads it back).

And whenever the controller has settled (its watches delivered everything, nothing left to
do; after some steps and at the end, after a last relist): the `used` it wrote equals Σ
charges of the live bindings, and no pending charge of a binding it has observed (at the
charge's generation or later) is left. Breaking its re-read after a lost write, or its release
of a deleted binding or of an observed charge, fails these.

`KARMADAQUOTA_LONG=1` runs many more, longer histories; the default is sized for CI.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karmadaquota import resources, scopes
from karmadaquota.api import KarmadaQuota, ResourceBinding
from karmadaquota.charge import Charge, charge
from karmadaquota.controller.leader import AlwaysLeader
from karmadaquota.controller.manager import Controller
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.reconciler import ReconcilerConfig
from karmadaquota.evaluate import Decision
from karmadaquota.evaluate import evaluate as real_evaluate
from karmadaquota.kube.client import JSON
from karmadaquota.kube.retry import Backoff
from karmadaquota.quantity import Quantity, QuantityError
from karmadaquota.resources import ResourceList
from karmadaquota.webhook import review
from karmadaquota.webhook.batcher import Batcher, BatcherConfig, ChargeRequest
from karmadaquota.webhook.handlers import Webhook
from karmadaquota.webhook.metrics import WebhookMetrics
from tests import fake_api
from tests.fake_api import FakeApiServer, Ref, quota_doc
from tests.polling import until

LONG = os.environ.get("KARMADAQUOTA_LONG") == "1"
NS = "ns"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
MEMBERS = ("m1", "m2", "m3")
# a step has at most 3 interfering writes and a dozen webhook writes: the controller re-reading
# after each lost write gets through within this many attempts
MAX_ATTEMPTS = 30
# a write that only folds pending charges into `used` waits this long (ReconcilerConfig):
# the histories' admissions meet quotas whose folds wait
FOLD_DELAY = 0.02
INVARIANT_SETTINGS = settings(
    max_examples=1000 if LONG else 40,
    deadline=None,
    derandomize=not LONG,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ---------------------------------------------------------------------------------------------
# generated input: every quantity form, zero, negative and huge values

# Ordinary values most of the time (so that histories admit, update and conflict), hostile ones
# (negative, huge, beyond what a quantity holds) often enough that every history may meet them.
NORMAL_CPU = ["100m", "250m", "1", "2", "1.5", "5e-3", "0"]
NORMAL_MEMORY = ["128Mi", "256M", "1Gi", "0"]
NORMAL_REPLICAS = [0, 1, 1, 1, 2, 2, 3]


@dataclass(frozen=True)
class Values:
    """Where quantities and replica counts are drawn from."""

    cpu: st.SearchStrategy[str]
    memory: st.SearchStrategy[str]
    replicas: st.SearchStrategy[int]


HOSTILE = Values(
    st.sampled_from([*NORMAL_CPU * 5, "-4", "-100m", "1E"]),
    st.sampled_from([*NORMAL_MEMORY * 6, "-1Gi", "8Ei"]),
    st.sampled_from(NORMAL_REPLICAS * 6 + [-1, -7, 2**31 - 1]),
)
# Bindings that exist before the webhook is installed are never refused, so their sum lands in
# status.used: kept within what a quantity can hold (2^63-1 of its unit) — a larger sum is
# written but cannot be read back.
BOUNDED = Values(
    st.sampled_from([*NORMAL_CPU, "-4", "-100m", "64k"]),
    st.sampled_from([*NORMAL_MEMORY, "-1Gi"]),
    st.sampled_from([0, 1, 2, 3, 4, -1, -7]),
)
NORMAL = Values(
    st.sampled_from(NORMAL_CPU), st.sampled_from(NORMAL_MEMORY), st.sampled_from(NORMAL_REPLICAS)
)
PRIORITY = st.sampled_from(["", "high", "low"])


@st.composite
def requirements(draw: st.DrawFn, values: Values) -> dict[str, Any] | None:
    if draw(st.integers(0, 11)) == 0:
        return None  # no replicaRequirements at all
    req: dict[str, str] = {}
    if draw(st.integers(0, 19)):
        req["cpu"] = draw(values.cpu)
    if draw(st.integers(0, 19)):
        req["memory"] = draw(values.memory)
    return {"resourceRequest": req, "priorityClassName": draw(PRIORITY)}


@st.composite
def specs(draw: st.DrawFn, values: Values = HOSTILE) -> dict[str, Any]:
    """A ResourceBinding spec as karmada-controller-manager (or a hostile interpreter) writes."""
    if draw(st.integers(0, 7)) == 0:
        return {"resource": {"apiVersion": "v1", "kind": "Service", "name": "svc"}}
    spec: dict[str, Any] = {
        "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "replicas": draw(values.replicas),
    }
    reqs = draw(requirements(values))
    if reqs is not None:
        spec["replicaRequirements"] = reqs
    if draw(st.integers(0, 3)) == 0:
        spec["components"] = [
            {
                "name": f"c{i}",
                "replicas": draw(values.replicas),
                "replicaRequirements": draw(requirements(values)),
            }
            for i in range(draw(st.integers(1, 3)))
        ]
    placed = draw(st.lists(st.sampled_from(MEMBERS), unique=True, max_size=3))
    spec["clusters"] = [{"name": m, "replicas": draw(values.replicas)} for m in placed]
    return spec


@dataclass(frozen=True)
class Create:
    spec: dict[str, Any]
    dry_run: bool
    replica: int


@dataclass(frozen=True)
class Update:
    target: int  # index into the admitted live bindings (modulo their number)
    spec: dict[str, Any]
    dry_run: bool
    replica: int


@dataclass(frozen=True)
class Delete:
    target: int


Op = Create | Update | Delete


@dataclass(frozen=True)
class Step:
    ops: list[Op]
    sync: bool  # the controller recomputes every quota concurrently with the admissions
    relist: bool  # ... after a relist instead of from watch events
    interfere: int  # another writer wins the next n status writes
    leader: int  # an old leader's late write gets in before each of the controller's next n
    refresh: bool  # the replicas' caches catch up with the server afterwards


def ops() -> st.SearchStrategy[Op]:
    replica = st.sampled_from([0, 0, 0, 1])  # mostly one replica: contended batches
    dry_run = st.sampled_from([False, False, False, True])
    create = st.builds(Create, specs(), dry_run, replica)
    update = st.builds(Update, st.integers(0, 50), specs(), dry_run, replica)
    delete = st.builds(Delete, st.integers(0, 50))
    kind = st.sampled_from(["create"] * 3 + ["update"] * 4 + ["delete"])
    return kind.flatmap(lambda k: {"create": create, "update": update, "delete": delete}[k])


STEPS = st.builds(
    Step,
    st.lists(ops(), min_size=2, max_size=10 if LONG else 6),
    st.booleans(),
    st.booleans(),
    st.integers(0, 3),
    st.integers(0, 2),
    st.booleans(),
)


# Every history starts with creates of ordinary workloads, so that later steps have bindings
# to scale, re-place and delete.
SEED_STEP = st.builds(
    Step,
    st.lists(st.builds(Create, specs(NORMAL), st.just(False), st.just(0)), min_size=2, max_size=4),
    st.just(False),
    st.just(False),
    st.just(0),
    st.just(0),
    st.just(True),
)


@dataclass(frozen=True)
class History:
    hard: dict[str, dict[str, str]]
    preexisting: list[dict[str, Any]]
    steps: list[Step]


HISTORIES = st.builds(
    History,
    st.fixed_dictionaries(
        {
            "all": st.fixed_dictionaries(
                {
                    "requests.cpu": st.sampled_from(["2500m", "4", "50"]),
                    "pods": st.sampled_from(["3", "6", "100"]),
                    "requests.memory": st.sampled_from(["1Gi", "16Gi", "64Gi"]),
                    "count/deployments.apps": st.sampled_from(["2", "100"]),
                }
            ),
            "high": st.fixed_dictionaries(
                {"requests.cpu": st.sampled_from(["1", "5"]), "pods": st.sampled_from(["1", "8"])}
            ),
            "besteffort": st.fixed_dictionaries({"pods": st.sampled_from(["0", "3", "10"])}),
        }
    ),
    st.lists(specs(BOUNDED), max_size=3),
    st.builds(
        lambda first, rest: [first, *rest],
        SEED_STEP,
        st.lists(STEPS, min_size=1, max_size=12 if LONG else 6),
    ),
)

SCOPES: dict[str, dict[str, Any]] = {
    "high": {
        "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]
    },
    "besteffort": {"matchExpressions": [{"scopeName": "BestEffort", "operator": "Exists"}]},
}

# ---------------------------------------------------------------------------------------------
# the system under test


def binding_doc(uid: str, spec: Mapping[str, Any], generation: int) -> JSON:
    """A binding around a generated spec (the shared builders build specs from parameters)."""
    return {
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {"name": uid, "namespace": NS, "uid": uid, "generation": generation},
        "spec": dict(spec),
    }


@dataclass
class Replica:
    """One webhook replica: its cache, its batcher, and what its batcher decided."""

    store: fake_api.Replica
    batcher: Batcher
    admit: Callable[[review.Request], Awaitable[Decision]]
    finals: list[tuple[Charge, Decision]] = field(default_factory=list)


def replica(api: FakeApiServer) -> Replica:
    store = fake_api.Replica(api=api)
    store.refresh()
    cache = store.quota_store()
    # no real waiting between conflicting writes: the interleaving stays deterministic
    batcher = Batcher(store, BatcherConfig(conflict_backoff=Backoff(0.0, 0.0)), clock=lambda: NOW)
    webhook = Webhook(cache, batcher, WebhookMetrics())
    r = Replica(store, batcher, webhook.admit_binding)
    submit = batcher.submit

    async def recording_submit(p: ChargeRequest) -> Decision:
        d = await submit(p)
        r.finals.append((p.new, d))
        return d

    batcher.submit = recording_submit  # type: ignore[method-assign]
    return r


def request(op: str, new: JSON, old: JSON | None, dry_run: bool) -> review.Request:
    return review.Request.model_validate(
        {
            "uid": f"review-{new['metadata']['uid']}-{new['metadata']['generation']}",
            "resource": {
                "group": "work.karmada.io",
                "version": "v1alpha2",
                "resource": "resourcebindings",
            },
            "namespace": NS,
            "name": new["metadata"]["name"],
            "operation": op,
            "object": new,
            "oldObject": old,
            "dryRun": dry_run,
            "userInfo": {"username": "karmada-controller-manager", "groups": ["system:masters"]},
        }
    )


def controller(api: FakeApiServer) -> Controller:
    """The real controller on the fake's lists and watches: no waiting between a change and its
    recompute, nor between a lost compare-and-swap and its re-read (the interleaving stays
    deterministic), no periodic relist (a step compacts the watch history instead), and more
    attempts of a write than a history has writers to lose against."""
    return Controller(
        api,
        ControllerMetrics(),
        AlwaysLeader(),
        ReconcilerConfig(
            quiet=0.0,
            max_delay=0.0,
            conflict_backoff=Backoff(0.0, 0.0),
            max_attempts=MAX_ATTEMPTS,
            page_size=2,
            member_watch=False,
            resync_period=None,
            fold_delay=FOLD_DELAY,
        ),
        clock=lambda: NOW,
    )


async def settle(api: FakeApiServer, c: Controller) -> None:
    """Wait until the controller has been told everything and is done with it: both watches
    open and drained, nothing marked or running. A quota whose every write attempt lost would
    only come back later (a timer): with `MAX_ATTEMPTS` no history makes the real controller
    give up, so it is not waited for, and `check_controller` finds its figures stale. A fold
    that waits (`fold_delay`, short here: admissions race it) is waited for."""
    await until(
        lambda: (
            api.watching("resourcebindings")
            and api.watching("karmadaquotas")
            and c.idle()
            and not c.reconciler.folds_waiting
        ),
        timeout=10,
        what="the controller settles",
    )


def expected_used(quota: KarmadaQuota, bindings: Any) -> ResourceList:
    """Σ non-negative charge of the bindings matching the quota's scopes, per hard name."""
    hard = resources.parse_resource_list(quota.spec.hard, "spec.hard")
    exprs = scopes.expressions(quota.spec)
    total: ResourceList = dict.fromkeys(hard, Quantity.zero())
    for b in bindings:
        try:
            c = charge(b)
        except QuantityError:
            continue  # unreadable: the controller logs it and counts nothing (index.safe_observe)
        if scopes.matches(exprs, c.traits):
            # a negative value never lowers usage: the charge that counts is its positive part
            own = resources.positive_part(resources.mask(c.total, hard.keys()))
            total = resources.add(total, own)
    return total


# ---------------------------------------------------------------------------------------------
# the run


@contextmanager
def recorded_denials() -> Iterator[set[int]]:
    """ids of the charges any evaluation in the batcher denied (first pass or re-check),
    except a first pass's on a cached copy that the live read confirming its refusals found
    stale: the batch is then evaluated afresh, and that pass's denials are the first."""
    denied: set[int] = set()
    keep: list[Charge] = []
    drafts: dict[asyncio.Task[Any] | None, set[int]] = {}  # per batcher worker: this batch's
    process, confirm = Batcher._process, Batcher._confirm

    def evaluate(quotas: Any, new: Charge, old: Charge | None = None, *a: Any) -> Decision:
        d = real_evaluate(quotas, new, old, *a)
        if not d.allowed:
            denied.add(id(new))
            drafts.setdefault(asyncio.current_task(), set()).add(id(new))
            keep.append(new)  # ids stay unique while recorded
        return d

    async def processing(self: Batcher, *a: Any, **kw: Any) -> None:
        drafts[asyncio.current_task()] = set()
        await process(self, *a, **kw)

    async def confirming(self: Batcher, *a: Any, **kw: Any) -> bool:
        stale = await confirm(self, *a, **kw)
        if stale:
            denied.difference_update(drafts.pop(asyncio.current_task(), set()))
        return stale

    with (
        mock.patch("karmadaquota.webhook.batcher.evaluate", evaluate),
        mock.patch.object(Batcher, "_process", processing),
        mock.patch.object(Batcher, "_confirm", confirming),
    ):
        yield denied


async def run(history: History) -> None:
    api = FakeApiServer()
    for name, hard in history.hard.items():
        api.add_quota(quota_doc(name, NS, hard=hard, scope_selector=SCOPES.get(name)))
    uids = (f"rb-{i}" for i in itertools.count())
    preexisting: set[str] = set()
    for spec in history.preexisting:  # created before the webhook was installed
        doc = api.put_binding(binding_doc(next(uids), spec, 1))
        preexisting.add(doc["metadata"]["uid"])
    c = controller(api)
    task = asyncio.create_task(c.run())
    try:
        await settle(api, c)
        check_controller(api)
        replicas = [replica(api), replica(api)]
        with recorded_denials() as denied:
            for step in history.steps:
                await run_step(api, c, replicas, step, uids, preexisting)
                check(api, preexisting, replicas, denied)
        api.compact()  # a last relist: the controller's figures from a full list
        await settle(api, c)
        check_controller(api)
        check(api, preexisting, replicas, set())
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def run_step(
    api: FakeApiServer,
    c: Controller,
    replicas: list[Replica],
    step: Step,
    uids: Iterator[str],
    preexisting: set[str],
) -> None:
    """One step; the controller runs all along, told of every change by its watches."""
    api.interfere(step.interfere)
    api.intercept(functools.partial(old_leader_writes, api), times=step.leader)
    touched: set[str] = set()
    for op in step.ops:
        if isinstance(op, Delete) and api.bindings:
            keys = sorted(api.bindings)
            _, uid = keys[op.target % len(keys)]
            api.delete_binding(NS, uid)
            touched.add(uid)
    if step.sync:  # every quota recomputed concurrently with the admissions ...
        c.mark_all()
    if step.relist:  # ... or after a relist: the watches answer 410 Gone
        api.compact()
    admissions: list[tuple[JSON, Any]] = []
    for op in step.ops:
        if isinstance(op, Create):
            new = binding_doc(next(uids), op.spec, 1)
            admit = replicas[op.replica].admit(request("CREATE", new, None, op.dry_run))
            admissions.append((new if not op.dry_run else {}, admit))
        elif isinstance(op, Update):
            # bindings created before the webhook are only ever deleted (see `check`)
            live = sorted(n for _, n in api.bindings if n not in preexisting | touched)
            if not live:
                continue
            uid = live[op.target % len(live)]
            touched.add(uid)
            old = api.bindings[(NS, uid)]
            new = binding_doc(uid, op.spec, old["metadata"]["generation"] + 1)
            admit = replicas[op.replica].admit(request("UPDATE", new, old, op.dry_run))
            admissions.append((new if not op.dry_run else {}, admit))
    results = await asyncio.gather(*(a for _, a in admissions))
    for (new, _), decision in zip(admissions, results, strict=True):
        if new and decision.allowed:  # the API server stores what admission allowed
            api.put_binding(new)
    if step.refresh:
        await settle(api, c)
        check_controller(api)
        for r in replicas:
            r.store.refresh()


def old_leader_writes(api: FakeApiServer, ref: Ref, _: Any) -> None:
    """Another controller (a leader that lost its lease) writes the quota's status first: its
    revision moves on, so the controller's patch fails its test and must be computed again
    from the version that won."""

    def newer_revision(q: JSON) -> None:
        revision = q.get("status", {}).get("controllerRevision")
        if isinstance(revision, int):
            q["status"]["controllerRevision"] = revision + 1

    api.bump(ref.namespace, ref.name, newer_revision)


def check_controller(api: FakeApiServer) -> None:
    """Once the controller has settled: the `used` it wrote is Σ charges of the live bindings
    (it has been told of all of them), and it keeps no pending charge of a binding it has
    observed at the charge's generation or later."""
    live = {n: ResourceBinding.model_validate(d) for (_, n), d in api.bindings.items()}
    for (_, name), raw in api.quotas.items():
        quota = KarmadaQuota.model_validate(raw)
        used = resources.parse_resource_list(quota.status.used, "status.used")
        expected = expected_used(quota, live.values())
        assert {n: q.nanos for n, q in used.items()} == {n: q.nanos for n, q in expected.items()}, (
            f"{name}: used {quota.status.used} is not the sum of the charges of the live bindings"
        )
        for r in quota.status.reservations:
            b = live.get(r.reservedBy.uid)
            assert b is None or b.metadata.generation < r.generation, (
                f"{name}: the pending charge of {r.reservedBy.uid} (generation {r.generation}) "
                "is kept although the controller observed the binding"
            )


def check_rereads(api: FakeApiServer) -> None:
    """After a lost write the controller computes the next one from a newer version: the one
    its watch delivered since, else one read back. A version delivered may still be older
    than the winner, so a write may lose twice against one stored version, never more."""
    for (path, version), n in Counter((p, v) for _, p, v in api.lost).items():
        assert n <= 2, (
            f"the controller lost its write of {path} {n} times against version {version}: "
            "it retried without reading the version that won"
        )


def check(
    api: FakeApiServer, preexisting: set[str], replicas: list[Replica], denied: set[int]
) -> None:
    live = [ResourceBinding.model_validate(d) for d in api.bindings.values()]
    before = [b for b in live if b.metadata.uid in preexisting]
    for (ns, name), raw in api.quotas.items():
        quota = KarmadaQuota.model_validate(raw)
        hard = resources.parse_resource_list(quota.spec.hard, "spec.hard")
        total = expected_used(quota, live)
        grandfathered = expected_used(quota, before)
        for r, cap in hard.items():
            assert total[r] <= max(cap, grandfathered[r]), (
                f"{ns}/{name}: live bindings charge {r}={total[r]} over hard {cap}"
            )
        used = resources.parse_resource_list(quota.status.used, "status.used")
        assert all(q.sign >= 0 for q in used.values()), f"{name}: negative used {used}"
        for cluster in quota.status.aggregatedStatus:
            rl = resources.parse_resource_list(cluster.used, "aggregatedStatus.used")
            assert all(q.sign >= 0 for q in rl.values()), f"{name}: negative used {cluster}"
    check_rereads(api)
    for r in replicas:
        for new, decision in r.finals:
            if id(new) in denied:
                assert not decision.allowed, "a retry admitted what a check had denied"


@INVARIANT_SETTINGS
@given(HISTORIES)
def test_nothing_over_admits_and_the_controller_agrees(history: History) -> None:
    asyncio.run(run(history))
