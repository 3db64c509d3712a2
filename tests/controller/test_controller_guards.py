"""memberEnforcement ResourceQuota through the controller: observed usage counts in `used`,
the leader keeps the guards (finalizer first) and removes them when enforcement is switched off
or the quota is deleted. The fake API server (the controller fed by its watches, as in the
reconciler tests), fake members of the guard tests (every applied guard write checked
against Σ ≤ hard)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from karmadaquota.controller import pods as pod_usage
from karmadaquota.controller.guard_keeper import FINALIZER, GuardKeeper
from karmadaquota.controller.manager import Controller
from karmadaquota.controller.members import Members
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.reconciler import ReconcilerConfig
from karmadaquota.kube import paths
from karmadaquota.kube.client import JSON, KubeError
from karmadaquota.kube.retry import Backoff
from karmadaquota.quantity import NANO
from tests.controller.test_controller_reconciler import (
    NS,
    Lead,
    add_binding,
    add_quota,
    add_reservation,
    controlling,
    listed,
    quiet,
    quota,
    used,
)
from tests.fake_api import FakeApiServer
from tests.fake_members import Fleet
from tests.polling import until

MEMBERS = ["member1", "member2", "member3"]
HARD = {"pods": "10", "requests.cpu": "10", "count/deployments.apps": "5"}


def pod(name: str, cpu: str = "1") -> JSON:
    return {
        "metadata": {"name": name, "namespace": NS, "uid": f"pod-{name}"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Running"},
    }


@pytest.fixture
async def env() -> AsyncIterator[tuple[FakeApiServer, Controller, Fleet, Members]]:
    api = FakeApiServer()
    fleet = Fleet(MEMBERS, {"pods": 10 * NANO, "requests.cpu": 10 * NANO})
    members = fleet.registry()
    for w in members.views():
        # the pod and claim watches are played by the test (w.table, w.claims)
        w._synced = w._claims_settled = True
    c = Controller(
        api,
        ControllerMetrics(),
        Lead(),
        ReconcilerConfig(quiet=0.01, max_delay=0.1, member_watch=True),
        members=members,
        guards=GuardKeeper(members, poll=0.0),
    )
    async with controlling(c):
        yield api, c, fleet, members


def guard_pods(fleet: Fleet) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for m in MEMBERS:
        g = fleet.guard(m, NS, "q")
        out[m] = None if g is None else g["spec"]["hard"]["pods"]
    return out


def shown(api: FakeApiServer) -> dict[str, Any]:
    """aggregatedStatus[].guard per member, as the quota's status shows it."""
    return {x["clusterName"]: x.get("guard") for x in quota(api)["status"]["aggregatedStatus"]}


def run_pods(c: Controller, members: Members, member: str, *names: str) -> None:
    w = members.get(member)
    assert w is not None
    for n in names:
        w.table.put(NS, f"pod-{n}", pod_usage.pod_usage(pod(n)))
    c.member_changed([NS])


async def test_out_of_band_pods_count_and_the_guards_share_the_rest(env: Any) -> None:
    api, c, fleet, members = env
    add_quota(api, "q", HARD, spec={"memberEnforcement": "ResourceQuota"})
    add_binding(api, "web", replicas=4, requests={"cpu": "1"}, clusters={"member1": 4})
    await listed(c)
    await until(lambda: used(api).get("pods") == "4")
    # the guards (finalizer first) follow the recompute in a queue of their own
    await until(lambda: FINALIZER in quota(api)["metadata"].get("finalizers", []))
    await until(lambda: guard_pods(fleet) == {"member1": "6", "member2": "2", "member3": "2"})
    # 3 pods made directly in member2: counted, and the headroom is split again
    run_pods(c, members, "member2", "a", "b", "c")
    await until(
        lambda: used(api) == {"count/deployments.apps": "1", "pods": "7", "requests.cpu": "7"}
    )
    # 10 - 4 - 3 = 3 to share: one each
    await until(lambda: guard_pods(fleet) == {"member1": "5", "member2": "4", "member3": "1"})

    def conditions() -> dict[str, Any]:
        return {x["type"]: x for x in quota(api)["status"].get("conditions", [])}

    # the guards follow the recompute in a queue of their own: the status write that carries
    # the condition may land just after them (a lost compare-and-swap retried)
    await until(lambda: conditions().get("OutOfBandUsage", {}).get("status") == "True")
    conds = conditions()
    assert "member2: pods=3, requests.cpu=3" in conds["OutOfBandUsage"]["message"]
    await until(lambda: shown(api)["member2"] == {"pods": "4", "requests.cpu": "4"})
    by = {x["clusterName"]: x for x in quota(api)["status"]["aggregatedStatus"]}
    assert by["member2"]["observed"]["pods"] == "3" and by["member2"]["used"]["pods"] == "0"
    assert fleet.worst["pods"] <= 10 * NANO and fleet.worst["requests.cpu"] <= 10 * NANO
    # count/deployments.apps is admission's only: no guard holds it
    g = fleet.guard("member1", NS, "q")
    assert g is not None and set(g["spec"]["hard"]) == {"pods", "requests.cpu"}


async def test_pods_karmada_placed_count_once(env: Any) -> None:
    api, c, _, members = env
    add_quota(api, "q", HARD, spec={"memberEnforcement": "ResourceQuota"})
    add_binding(api, "web", replicas=2, requests={"cpu": "1"}, clusters={"member1": 2})
    await listed(c)
    run_pods(c, members, "member1", "web-1", "web-2")  # Karmada's own two replicas
    await until(lambda: quiet(c) and used(api).get("pods") == "2")
    assert used(api)["requests.cpu"] == "2"
    conds = {x["type"]: x for x in quota(api)["status"]["conditions"]}
    assert conds["OutOfBandUsage"]["status"] == "False"


async def test_unplaced_replicas_count_and_are_not_shared_out(env: Any) -> None:
    api, c, fleet, _ = env
    add_quota(api, "q", HARD, spec={"memberEnforcement": "ResourceQuota"})
    add_binding(api, "web", replicas=4, requests={"cpu": "1"})  # not scheduled yet
    await listed(c)
    await until(lambda: used(api).get("pods") == "4")
    await until(lambda: guard_pods(fleet) == {"member1": "2", "member2": "2", "member3": "2"})


async def test_switching_enforcement_off_removes_every_guard_then_the_finalizer(env: Any) -> None:
    api, c, fleet, members = env
    add_quota(api, "q", HARD, spec={"memberEnforcement": "ResourceQuota"})
    await listed(c)
    await until(lambda: all(v is not None for v in guard_pods(fleet).values()))
    run_pods(c, members, "member2", "a")
    await until(lambda: used(api).get("pods") == "1")
    fleet.members["member3"].down = True
    api.bump(NS, "q", lambda q: q["spec"].update(memberEnforcement="None"))
    await until(lambda: guard_pods(fleet)["member1"] is None)
    assert guard_pods(fleet)["member3"] is not None  # unreachable: removed once it is back
    assert FINALIZER in quota(api)["metadata"]["finalizers"]
    assert used(api)["pods"] == "1"  # the pod still runs: counted without guards too
    fleet.members["member3"].down = False
    await until(lambda: FINALIZER not in quota(api)["metadata"]["finalizers"], timeout=10)
    assert guard_pods(fleet) == {"member1": None, "member2": None, "member3": None}


async def test_deleting_the_quota_removes_every_guard_before_it_goes(env: Any) -> None:
    api, c, fleet, _ = env
    add_quota(api, "q", HARD, spec={"memberEnforcement": "ResourceQuota"})
    await listed(c)
    await until(lambda: all(v is not None for v in guard_pods(fleet).values()))
    api.delete(paths.quota(NS, "q"))
    await until(lambda: (NS, "q") not in api.quotas)
    assert guard_pods(fleet) == {"member1": None, "member2": None, "member3": None}
    # the controller's patch right on quotas is used for the finalizer only (docs/security.md)
    sent = [b for m, p, b in api.sent if m == "PATCH" and p == paths.quota(NS, "q")]
    assert [p["metadata"]["finalizers"] for p in sent] == [[FINALIZER], []]
    assert all(isinstance(p, dict) and set(p) == {"metadata"} for p in sent)
    assert all(set(p["metadata"]) == {"finalizers", "resourceVersion"} for p in sent)


async def test_a_follower_writes_no_guard(env: Any) -> None:
    api, c, fleet, _ = env
    c.leadership.leader = False
    add_quota(api, "q", HARD, spec={"memberEnforcement": "ResourceQuota"})
    await listed(c)
    await until(lambda: quiet(c))
    assert guard_pods(fleet) == {"member1": None, "member2": None, "member3": None}
    assert fleet.requests == []


def conditions(api: FakeApiServer) -> dict[str, Any]:
    return {c["type"]: c for c in quota(api)["status"].get("conditions", [])}


async def test_the_guarded_condition_names_a_member_without_its_guard(env: Any) -> None:
    api, c, fleet, members = env
    add_quota(api, "q", HARD, spec={"memberEnforcement": "ResourceQuota"})
    await listed(c)
    await until(lambda: conditions(api).get("Guarded", {}).get("status") == "True")
    fleet.members["member3"].down = True
    run_pods(c, members, "member1", "a")  # a rebalance: member3 is found down
    await until(lambda: conditions(api)["Guarded"]["status"] == "False")
    message = conditions(api)["Guarded"]["message"]
    assert message.startswith("member3: unreachable, keeps the guard it has:"), message
    assert conditions(api)["Guarded"]["reason"] == "MemberNotGuarded"
    fleet.members["member3"].down = False
    c.member_changed(None)  # its pod watch recovered
    await until(lambda: conditions(api)["Guarded"]["status"] == "True", timeout=10)


async def test_an_object_placed_in_several_members_counts_once(env: Any) -> None:
    api, c, _, members = env
    add_quota(api, "q", HARD, spec={"memberEnforcement": "ResourceQuota"})
    add_binding(
        api, "web", replicas=4, requests={"cpu": "1"}, clusters={"member1": 2, "member2": 2}
    )
    await listed(c)
    run_pods(c, members, "member3", "x")  # and one pod around Karmada
    await until(lambda: used(api).get("pods") == "5")
    assert used(api) == {"count/deployments.apps": "1", "pods": "5", "requests.cpu": "5"}


async def test_admitted_charges_not_yet_in_a_member_are_kept_out_of_the_shares(env: Any) -> None:
    api, c, fleet, _ = env
    add_quota(api, "q", HARD, spec={"memberEnforcement": "ResourceQuota"})
    await listed(c)
    await until(lambda: guard_pods(fleet) == {"member1": "4", "member2": "3", "member3": "3"})
    # the webhook admitted a binding of 4 pods the controller has not seen yet
    add_reservation(api, "q", "uid-new", {"pods": "4"})
    await until(lambda: guard_pods(fleet) == {"member1": "2", "member2": "2", "member3": "2"})
    assert fleet.worst["pods"] <= 10 * NANO


async def test_a_finalizer_not_written_is_retried_on_the_guard_queue_not_the_recompute(
    env: Any,
) -> None:
    """Issue 28: a job retries on its own queue (its rate limiter), never by marking the
    recompute again: refused finalizer patches cost the recompute queue nothing."""
    api, c, fleet, _ = env
    assert c.guards is not None
    c.guards.queue.limiter.backoff = Backoff(0.1, 0.2)
    refused: list[int] = []  # the recompute queue's flushes at each refusal

    def finalizer_refused(_: Any, body: JSON) -> None:
        if "finalizers" in (body.get("metadata") or {}) and len(refused) < 4:
            refused.append(c.dirty.flushes)
            raise KubeError(500, "InternalError", "etcd is slow")

    api.intercept(finalizer_refused, times=1000, match=paths.quota(NS, "q"))
    add_quota(api, "q", HARD, spec={"memberEnforcement": "ResourceQuota"})
    await listed(c)
    await until(lambda: FINALIZER in quota(api)["metadata"].get("finalizers", []))
    assert len(refused) == 4
    # the first refusal may come before the recompute of the quota's own status write (its
    # watch event); after it, no recompute between the retries
    assert refused[1] == refused[-1], refused
    await until(lambda: guard_pods(fleet) == {"member1": "4", "member2": "3", "member3": "3"})
    # done: forgotten once the sync that wrote the guards returns (just after their writes)
    await until(lambda: c.guards.queue.limiter.retries(NS) == 0, what="the retries forgotten")
