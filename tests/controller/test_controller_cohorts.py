"""The controller's cohorts against the fake API server, fed by its real informers: a waiting
workload is lent what another quota leaves unused, lender first; the loan comes back once the
borrower no longer uses it, lender after borrower; a charge admitted between the read and the
write of a loan makes that write lose (docs/cohorts.md)."""

from __future__ import annotations

from typing import Any

from karmadaquota import resources
from karmadaquota.api import KarmadaQuota
from karmadaquota.controller.manager import Controller
from karmadaquota.evaluate import QuotaView
from karmadaquota.kube.client import JSON
from tests.conftest import raw_binding, reservation
from tests.controller.test_controller_reconciler import Lead, env, listed  # noqa: F401
from tests.fake_api import QUOTAS, FakeApiServer
from tests.polling import until

WAITING = {
    "template": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "big", "uid": "d-big"},
    "binding": "big-deployment",
    "requested": {"pods": "5"},
    "firstRefused": "2026-01-01T00:00:00Z",
}


def add(api: FakeApiServer, ns: str, pods: int, **spec: Any) -> JSON:
    return api.add_quota(
        {
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "KarmadaQuota",
            "metadata": {"name": "team", "namespace": ns, "uid": f"q-{ns}"},
            "spec": {
                "hard": {"pods": str(pods)},
                "cohort": "research",
                "memberEnforcement": "None",
                **spec,
            },
        }
    )


def status(api: FakeApiServer, ns: str) -> JSON:
    got: JSON = api.quotas[(ns, "team")].get("status") or {}
    return got


def loans(api: FakeApiServer, ns: str, direction: str) -> dict[str, str]:
    return {e["quota"]: e["resources"]["pods"] for e in status(api, ns).get(direction) or []}


async def test_a_waiting_workload_is_lent_room_and_the_loan_comes_back(
    env: tuple[FakeApiServer, Controller, Lead],  # noqa: F811
) -> None:
    api, c, _ = env
    add(api, "a", 2)
    add(api, "b", 4, lendingLimit={"pods": "2"})
    await listed(c)
    await until(lambda: "pods" in status(api, "b").get("used", {}), what="b computed")
    # the webhook lists a workload of 5: 3 more than a's hard
    api.bump("a", "team", lambda o: o["status"].update(waiting=[WAITING]))
    await until(
        lambda: loans(api, "a", "borrowed") == {"b/team": "2"},
        what="a borrows b's lendable 2 (its lending limit), not the 1 more it asks for",
    )
    assert loans(api, "b", "lent") == {"a/team": "2"}
    assert status(api, "a")["loans"] == "borrowed pods: 2"
    assert status(api, "b")["loans"] == "lent pods: 2"

    # the workload gone from the waiting list and nothing in use: the loan comes back
    api.bump("a", "team", lambda o: o["status"].pop("waiting", None))
    await until(lambda: not status(api, "b").get("lent"), what="the loan back with b")
    assert not status(api, "a").get("borrowed")


async def test_a_lender_lends_only_what_is_unused_when_it_is_written(
    env: tuple[FakeApiServer, Controller, Lead],  # noqa: F811
) -> None:
    api, c, _ = env
    add(api, "a", 0)
    add(api, "b", 2)
    await listed(c)
    await until(lambda: "pods" in status(api, "b").get("used", {}), what="b computed")

    # an admission into b (a pending charge of 2) lands between the controller's read of b
    # and its write of the loan
    def admitted_meanwhile(ref: object, body: object) -> None:
        api.bump(
            "b", "team", lambda o: o["status"].update(reservations=[reservation({"pods": "2"})])
        )

    api.intercept(admitted_meanwhile, times=1, match="/namespaces/b/")
    api.bump("a", "team", lambda o: o["status"].update(waiting=[WAITING]))
    # the write that lent 2 lost to the admission; written again, b lends nothing: it has
    # nothing unused (the retry also rewrites the charge in the current layout: `pending`)
    await until(lambda: "pending" in status(api, "b"), what="b written again after its charge")
    assert not status(api, "b").get("lent"), status(api, "b")
    assert not status(api, "a").get("borrowed")
    # and no version of b ever stored lent what its charge held
    for _, _, obj in api.log[QUOTAS]:
        if obj["metadata"]["namespace"] == "b" and obj.get("status", {}).get("used"):
            view = QuotaView.of(KarmadaQuota.model_validate(obj))
            ok, _ = resources.less_or_equal(resources.add(view.used, view.reserved), view.hard)
            assert ok, obj["status"]


async def test_a_lender_that_reclaims_queues_the_borrowers_newest_binding(
    env: tuple[FakeApiServer, Controller, Lead],  # noqa: F811
) -> None:
    api, c, _ = env
    # a runs 4 pods of its hard 2, 2 of them lent by b; b (reclaimWithinCohort: Any) now has a
    # workload of 3 waiting, and may use 4 − 2
    for name, rv in (("old", 1), ("new", 2)):
        api.put_binding(
            raw_binding(name, namespace="a", replicas=2, clusters={"member1": 2}, rv=rv)
        )
    add(api, "a", 2)
    add(api, "b", 4, reclaimWithinCohort="Any")
    api.bump(
        "a",
        "team",
        lambda o: o.setdefault("status", {}).update(
            borrowed=[{"quota": "b/team", "resources": {"pods": "2"}}]
        ),
    )
    api.bump(
        "b",
        "team",
        lambda o: o.setdefault("status", {}).update(
            lent=[{"quota": "a/team", "resources": {"pods": "2"}}],
            waiting=[{**WAITING, "requested": {"pods": "3"}}],
        ),
    )
    await listed(c)

    def queued(name: str) -> bool:
        rb = api.bindings[("a", f"{name}-deployment")]
        annotations = rb["metadata"].get("annotations") or {}
        return annotations.get("quota.karmada.io/queued-by") == "team" and not rb["spec"].get(
            "clusters"
        )

    await until(lambda: queued("new"), what="a's most recently written binding queued")
    rb = api.bindings[("a", "new-deployment")]
    assert rb["spec"]["suspension"]["scheduling"] is True
    assert not queued("old"), "one binding of 2 covers what b is short (1)"
    # and the loan follows the usage: a uses its own 2 now, b may use 4 − what it still lends
    await until(lambda: status(api, "a").get("used", {}).get("pods") == "2", what="a's usage")
