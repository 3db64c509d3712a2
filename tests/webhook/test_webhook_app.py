"""The webhook's HTTP surface: reviews in, precise answers out, nothing malformed gets a 500."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karmadaquota import cli
from karmadaquota.api import KarmadaQuota
from karmadaquota.evaluate import Decision
from karmadaquota.kube import paths
from karmadaquota.kube.client import KubeError
from karmadaquota.kube.quotas import QuotaStore
from karmadaquota.kube.templates import TemplateStore
from karmadaquota.overrides import AllowList, refusals
from karmadaquota.trust import Writers
from karmadaquota.webhook import review as review_mod
from karmadaquota.webhook.admission import review_budget
from karmadaquota.webhook.backend import KubeQuotaBackend
from karmadaquota.webhook.batcher import Batcher
from karmadaquota.webhook.handlers import Webhook
from karmadaquota.webhook.metrics import WebhookMetrics
from karmadaquota.webhook.routes import DecisionLog, build_app
from tests.fake_api import FakeApiServer, Replica, quota_doc
from tests.polling import until
from tests.webhook_fakes import binding_doc

BINDINGS = {"group": "work.karmada.io", "version": "v1alpha2", "resource": "resourcebindings"}
QUOTAS = {"group": "quota.karmada.io", "version": "v1alpha1", "resource": "karmadaquotas"}
# karmada-controller-manager as the test bed and Karmada's installers authenticate it
CONTROLLER_MANAGER = {"username": "system:karmada:controller-manager", "groups": ["system:masters"]}
# a namespace editor (Kubernetes' edit + Karmada's karmada-edit)
TENANT = {"username": "alice", "groups": ["team-a", "system:authenticated"]}


def review(
    obj: dict[str, Any] | None,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    resource: dict[str, str] = BINDINGS,
    dry_run: bool = False,
    user: dict[str, Any] = CONTROLLER_MANAGER,
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "req-1",
            "resource": resource,
            "namespace": (obj or {}).get("metadata", {}).get("namespace", "ns"),
            "name": (obj or {}).get("metadata", {}).get("name", ""),
            "operation": operation,
            "object": obj,
            "oldObject": old,
            "dryRun": dry_run,
            "userInfo": user,
        },
    }


@pytest.fixture
async def setup() -> AsyncIterator[tuple[TestClient[Any, Any], Replica, Webhook]]:
    # admission alone (memberEnforcement None): what these tests judge is admission's own rule
    store = Replica(
        quota_doc(hard={"requests.cpu": "10", "pods": "100"}, member_enforcement="None")
    )
    cache = store.quota_store()
    webhook = Webhook(cache, Batcher(store), WebhookMetrics())
    client = TestClient(TestServer(build_app(webhook)))
    await client.start_server()
    yield client, store, webhook
    await client.close()


async def post(client: TestClient[Any, Any], path: str, body: Any) -> tuple[int, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    resp = await client.post(path, data=raw, headers={"Content-Type": "application/json"})
    text = await resp.text()
    return resp.status, (json.loads(text) if resp.status == 200 else text)


async def test_admits_within_quota_and_records_a_reservation(setup: Any) -> None:
    client, store, _ = setup
    status, body = await post(client, "/validate-resourcebinding", review(binding_doc("web")))
    assert status == 200
    assert body["response"] == {"uid": "req-1", "allowed": True}
    assert [r.reservedBy.name for r in store.stored().status.reservations] == ["web"]


async def test_denies_over_quota_with_kubernetes_wording_403_and_reason(setup: Any) -> None:
    client, store, _ = setup
    store.bump("ns", "team-a", lambda d: None)
    doc = binding_doc("big", replicas=11)
    status, body = await post(client, "/validate-resourcebinding", review(doc))
    assert status == 200
    resp = body["response"]
    assert resp["allowed"] is False
    assert resp["status"] == {
        "code": 403,
        "reason": "QuotaExceeded",
        "message": "exceeded quota: team-a, requested: requests.cpu=11, used: requests.cpu=0, "
        "limited: requests.cpu=10",
    }


async def test_dry_run_answers_without_writing(setup: Any) -> None:
    client, store, _ = setup
    status, body = await post(
        client, "/validate-resourcebinding", review(binding_doc("web"), dry_run=True)
    )
    assert status == 200 and body["response"]["allowed"] is True
    assert store.puts == 0


async def test_namespace_without_quota_is_admitted_without_work(setup: Any) -> None:
    client, store, _ = setup
    doc = binding_doc("web", namespace="elsewhere", replicas=1000)
    status, body = await post(client, "/validate-resourcebinding", review(doc))
    assert status == 200 and body["response"]["allowed"] is True
    assert store.puts == 0


async def test_delete_is_never_blocked(setup: Any) -> None:
    client, _, _ = setup
    status, body = await post(client, "/validate-resourcebinding", review(None, operation="DELETE"))
    assert status == 200 and body["response"]["allowed"] is True


async def test_a_bad_quantity_in_the_binding_is_denied_naming_the_field(setup: Any) -> None:
    client, store, _ = setup
    status, body = await post(
        client, "/validate-resourcebinding", review(binding_doc("web", cpu="12x"))
    )
    assert status == 200
    resp = body["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 422
    assert '"12x"' in resp["status"]["message"]
    assert "spec.replicaRequirements.resourceRequest[cpu]" in resp["status"]["message"]
    assert store.puts == 0


async def test_a_negative_request_is_refused_and_cannot_buy_room_for_others(setup: Any) -> None:
    """The attack: `cpu: -4` must not lower usage so that `cpu: 3` fits a quota of 2."""
    client, store, _ = setup
    status, body = await post(
        client, "/validate-resourcebinding", review(binding_doc("neg", cpu="-4"))
    )
    assert status == 200
    assert body["response"]["allowed"] is False
    assert body["response"]["status"] == {
        "code": 422,
        "reason": "Invalid",
        "message": 'ResourceBinding.work.karmada.io "neg" is invalid: '
        'spec.replicaRequirements.resourceRequest[cpu]: Invalid value: "-4": '
        "must be greater than or equal to 0",
    }
    assert store.puts == 0
    status, body = await post(
        client, "/validate-resourcebinding", review(binding_doc("big", cpu="11"))
    )
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["reason"] == "QuotaExceeded"


async def test_negative_replicas_on_update_are_refused_with_every_field(setup: Any) -> None:
    client, store, _ = setup
    old = binding_doc("web", replicas=1)
    new = binding_doc("web", replicas=-1, clusters=[("m1", -1)])
    status, body = await post(
        client, "/validate-resourcebinding", review(new, operation="UPDATE", old=old)
    )
    assert status == 200
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["message"] == (
        'ResourceBinding.work.karmada.io "web" is invalid: ['
        "spec.replicas: Invalid value: -1: must be greater than or equal to 0, "
        "spec.clusters[0].replicas: Invalid value: -1: must be greater than or equal to 0]"
    )
    assert store.puts == 0


async def test_huge_values_are_computed_exactly_and_denied_cleanly(setup: Any) -> None:
    client, store, _ = setup
    doc = binding_doc("huge", replicas=2**31 - 1, cpu="1E")
    status, body = await post(client, "/validate-resourcebinding", review(doc))
    assert status == 200
    assert body["response"]["status"] == {
        "code": 403,
        "reason": "QuotaExceeded",
        "message": f"exceeded quota: team-a, requested: pods={2**31 - 1},"
        f"requests.cpu={2**31 - 1}E, used: pods=0,requests.cpu=0, "
        "limited: pods=100,requests.cpu=10",
    }
    assert store.puts == 0


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"{not json", "request body is not JSON"),
        (b"[]", "must be a JSON object"),
        (
            {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"},
            "expected apiVersion",
        ),
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
            "request: Field required",
        ),
        (
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": ""},
            },
            "request.uid",
        ),
        (review(binding_doc("x"), resource=QUOTAS), "this endpoint admits resourcebindings"),
        (review(None), "request.object is required for CREATE"),
        (review(binding_doc("x"), operation="UPDATE"), "request.oldObject is required for UPDATE"),
    ],
)
async def test_malformed_reviews_get_400_with_a_precise_message(
    setup: Any, body: Any, expected: str
) -> None:
    client, store, _ = setup
    status, text = await post(client, "/validate-resourcebinding", body)
    assert status == 400
    assert expected in text
    assert store.puts == 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    request=st.fixed_dictionaries(
        {},
        optional={
            "uid": json_values,
            "resource": json_values | st.just(BINDINGS),
            "operation": json_values | st.sampled_from(["CREATE", "UPDATE", "DELETE"]),
            "namespace": json_values | st.just("ns"),
            "object": json_values | st.just(binding_doc("web")),
            "oldObject": json_values | st.just(binding_doc("web")),
            "dryRun": json_values,
        },
    )
)
async def test_fuzzed_reviews_never_crash_and_never_silently_allow_a_charge(
    setup: Any, request: dict[str, Any]
) -> None:
    client, store, _ = setup
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    puts = store.puts
    status, resp = await post(client, "/validate-resourcebinding", body)
    assert status in (200, 400)
    if status == 200:
        assert resp["response"]["uid"] == request["uid"]
    if store.puts > puts:  # something was charged: only ever for a well-formed binding review
        assert status == 200 and resp["response"]["allowed"] is True
        assert request["object"] == binding_doc("web")


async def test_quota_endpoint_rejects_what_cel_cannot_express_in_kubernetes_words(
    setup: Any,
) -> None:
    client, _, _ = setup
    bad = quota_doc(hard={"nvidia.com/gpu": "2", "requests.cpu": "1.2.3"})
    status, body = await post(client, "/validate-karmadaquota", review(bad, resource=QUOTAS))
    assert status == 200
    resp = body["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 422
    message = resp["status"]["message"]
    assert message.startswith('KarmadaQuota.quota.karmada.io "team-a" is invalid: [')
    assert 'spec.hard[nvidia.com/gpu]: Invalid value: "nvidia.com/gpu"' in message
    assert '"1.2.3"' in message


async def test_quota_endpoint_admits_a_valid_quota(setup: Any) -> None:
    client, _, _ = setup
    good = quota_doc(
        hard={"requests.cpu": "10", "pods": "5"},
        scope_selector={
            "matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}
            ]
        },
    )
    status, body = await post(client, "/validate-karmadaquota", review(good, resource=QUOTAS))
    assert status == 200 and body["response"]["allowed"] is True


async def test_readyz_waits_for_the_cache_and_metrics_are_served(setup: Any) -> None:
    client, _, webhook = setup
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    webhook.quotas.synced.clear()
    assert (await client.get("/readyz")).status == 503
    webhook.quotas.synced.set()
    await post(client, "/validate-resourcebinding", review(binding_doc("web")))
    text = await (await client.get("/metrics")).text()
    assert "karmadaquota_admission_duration_seconds_bucket" in text
    assert 'karmadaquota_admission_decisions_total{reason="",result="allowed"} 1.0' in text


def test_quota_model_round_trips_reservations() -> None:
    doc = quota_doc()
    doc["status"]["reservations"] = [
        {
            "reservedBy": {
                "apiVersion": "work.karmada.io/v1alpha2",
                "kind": "ResourceBinding",
                "name": "web",
                "namespace": "ns",
                "uid": "u",
            },
            "reserved": {"requests.cpu": "1"},
            "expirationTime": "2026-01-01T00:00:00Z",
            "generation": 3,
        }
    ]
    q = KarmadaQuota.model_validate(doc)
    status = q.model_dump(mode="json", exclude_none=True)["status"]
    # written in the wire layout (status.pending), read back as the same reservations
    assert "reservations" not in status
    assert status["pending"] == [
        {
            "charge": {"requests.cpu": "1"},
            "expires": "2026-01-01T00:00:00Z",
            "bindings": ["web/u/3"],
        }
    ]
    assert KarmadaQuota.model_validate({**doc, "status": status}) == q


async def test_before_the_cache_synced_every_charge_is_refused_not_allowed(setup: Any) -> None:
    client, store, webhook = setup
    webhook.quotas.synced.clear()
    doc = binding_doc("web", namespace="no-quota-here")
    status, body = await post(client, "/validate-resourcebinding", review(doc))
    resp = body["response"]
    assert status == 200 and resp["allowed"] is False
    assert resp["status"]["code"] == 503 and "not synced" in resp["status"]["message"]
    assert store.puts == 0


def test_a_review_whose_object_is_not_an_object_is_malformed() -> None:
    body = json.dumps(review(None) | {"request": review(None)["request"] | {"object": [1]}})
    with pytest.raises(review_mod.MalformedReview, match=r"request\.object: .*dictionary"):
        review_mod.parse(body.encode())
    parsed = review_mod.parse(json.dumps(review(binding_doc("web"))).encode())
    assert parsed.object == binding_doc("web") and parsed.oldObject is None


def _sum(text: str, metric: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(f"{metric}_sum{{")
    )


async def test_own_share_excludes_the_namespaces_api_time() -> None:
    """The store reports 100 s of API calls for the review's namespace while it waits: its
    own share is what remains (nothing), while the full latency is still recorded."""
    api_seconds: dict[str, float] = {}
    store = Replica(quota_doc(hard={"requests.cpu": "10", "pods": "100"}))
    real_put = store.put_status

    async def put_status(quota: dict[str, Any]) -> dict[str, Any]:
        api_seconds["ns"] = api_seconds.get("ns", 0.0) + 100.0
        return await real_put(quota)

    store.put_status = put_status  # type: ignore[method-assign]
    cache = store.quota_store()
    webhook = Webhook(cache, Batcher(store), WebhookMetrics(), api_seconds)
    async with TestClient(TestServer(build_app(webhook))) as client:
        status, body = await post(client, "/validate-resourcebinding", review(binding_doc("web")))
        assert status == 200 and body["response"]["allowed"] is True
        text = await (await client.get("/metrics")).text()
    assert store.puts == 1
    assert _sum(text, "karmadaquota_admission_duration_seconds") > 0
    assert _sum(text, "karmadaquota_admission_own_duration_seconds") == 0
    assert 'karmadaquota_admission_own_duration_seconds_bucket{le="0.00025"' in text


async def test_kube_store_accounts_api_time_per_namespace() -> None:
    api = FakeApiServer()
    quota = api.add_quota(quota_doc("q", namespace="a"))
    api.add_quota(quota_doc("q", namespace="b"))
    store = KubeQuotaBackend(api, QuotaStore(api))
    await store.put_status(quota)
    await store.get("b", "q")
    assert set(store.api_seconds) == {"a", "b"}
    assert all(v > 0 for v in store.api_seconds.values())


async def test_allowed_reviews_are_summarised_and_denials_logged_one_by_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    decisions = DecisionLog(interval=3600)
    allowed = review_mod.parse(json.dumps(review(binding_doc("web"))).encode())
    caplog.set_level(logging.INFO, logger="karmadaquota.webhook")
    for _ in range(3):
        decisions.record(allowed, "binding", Decision(True), 0.001)
    decisions.record(allowed, "binding", Decision(False, "exceeded quota: q", "QuotaExceeded"), 0)
    records = [r for r in caplog.records if r.name == "karmadaquota.webhook"]
    assert [(r.getMessage(), r.__dict__.get("result")) for r in records] == [
        ("admission decision", "denied")
    ]
    decisions.interval = 0
    decisions.record(allowed, "binding", Decision(True), 0.001)
    summary = caplog.records[-1]
    assert summary.getMessage() == "admission summary"
    assert (summary.__dict__["allowed"], summary.__dict__["denied"]) == (4, 1)


@pytest.mark.parametrize(
    ("timeout", "budget"),
    [("3s", 2.7), ("500ms", 0.45), ("1.5s", 1.35), ("1m", 54.0), (None, None), ("3", None)],
)
def test_review_budget_reads_the_api_servers_timeout(
    timeout: str | None, budget: float | None
) -> None:
    got = review_budget(timeout)
    assert got == pytest.approx(budget) if budget is not None else got is None


async def test_a_review_still_queued_at_its_deadline_times_out_and_reserves_nothing(
    setup: Any,
) -> None:
    """The first review's status write is slow; the second waits behind it past the deadline
    the API server sent: it is answered 504 Timeout and never written as a reservation."""
    client, store, _ = setup
    store.put_delay = 0.5  # models a slow API server, not synchronisation
    writing = asyncio.Event()
    real_put = store.put_status

    async def put_status(quota: dict[str, Any]) -> dict[str, Any]:
        writing.set()
        return await real_put(quota)

    store.put_status = put_status  # type: ignore[method-assign]
    path = "/validate-resourcebinding"
    first = asyncio.create_task(post(client, path, review(binding_doc("first"))))
    await asyncio.wait_for(writing.wait(), 10)  # the first review's write is in flight
    status, body = await post(client, f"{path}?timeout=100ms", review(binding_doc("second")))
    assert status == 200
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["code"] == 504
    assert body["response"]["status"]["reason"] == "Timeout"
    first_status, first_body = await first
    assert first_status == 200 and first_body["response"]["allowed"] is True
    # a third review queues behind anything still to be written for the second
    status, body = await post(client, path, review(binding_doc("third")))
    assert status == 200 and body["response"]["allowed"] is True
    reserved = [r.reservedBy.name for r in store.stored().status.reservations]
    assert reserved == ["first", "third"]


async def test_a_review_whose_deadline_passes_during_its_own_write_gives_its_reservation_back(
    setup: Any,
) -> None:
    """The review's batch is already writing when its deadline passes: it is answered 504 (the
    API server will not create the binding), so the reservation that write recorded is taken
    back at once — left in place it would refuse others until the controller's orphan audit."""
    client, store, _ = setup
    store.put_delay = 0.3  # models a slow API server, not synchronisation
    path = "/validate-resourcebinding"
    whole = binding_doc("whole", replicas=10)  # all 10 cpu of the quota
    status, body = await post(client, f"{path}?timeout=100ms", review(whole))
    assert status == 200 and body["response"]["status"]["reason"] == "Timeout"
    # the next review queues behind the write and its take-back: the quota is free for it
    status, body = await post(client, path, review(binding_doc("next", replicas=10)))
    assert status == 200 and body["response"]["allowed"] is True, body
    reserved = [r.reservedBy.name for r in store.stored().status.reservations]
    assert reserved == ["next"]


async def test_refusals_for_quota_are_recorded_dry_runs_are_not(setup: Any) -> None:
    from karmadaquota.webhook.refusals import record_refusals

    client, store, webhook = setup
    webhook.refusals = record_refusals(store, webhook.batcher, interval=0.05)
    big = binding_doc("big", replicas=11)
    status, body = await post(client, "/validate-resourcebinding", review(big, dry_run=True))
    assert status == 200 and body["response"]["allowed"] is False
    status, body = await post(client, "/validate-resourcebinding", review(big))
    assert status == 200 and body["response"]["status"]["reason"] == "QuotaExceeded"
    await until(lambda: bool(store.stored().status.waiting), what="refusal recorded")
    [entry] = store.stored().status.waiting
    assert (entry.binding, entry.refusals, entry.requested["requests.cpu"]) == ("big", 1, "11")
    await webhook.refusals.close()


async def test_a_quota_review_has_no_side_effect(setup: Any) -> None:
    """Issue 30: a forged quota review labelled a namespace that holds no quota. Labelling
    moved to the controller: admitting a quota writes nothing anywhere."""
    client, store, _ = setup
    before = store.stored().metadata.resourceVersion
    doc = quota_doc(hard={"pods": "5"})
    doc["metadata"]["namespace"] = "no-quota-here"
    doc["spec"]["onExceed"] = "Queue"
    status, body = await post(client, "/validate-karmadaquota", review(doc, resource=QUOTAS))
    assert status == 200 and body["response"]["allowed"] is True
    assert store.stored().metadata.resourceVersion == before
    assert store.puts == 0 and store.api.writes == []


# ---------------------------------------------------------------------------------------------
# trusted writers (issue 29: a namespace editor may write bindings under karmada-edit)


async def test_a_tenant_may_not_create_a_binding_in_a_namespace_with_a_quota(setup: Any) -> None:
    client, store, _ = setup
    status, body = await post(
        client, "/validate-resourcebinding", review(binding_doc("web"), user=TENANT)
    )
    assert status == 200
    response = body["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403 and response["status"]["reason"] == "Forbidden"
    assert response["status"]["message"] == (
        'resourcebindings.work.karmada.io "web" is forbidden: user "alice" may not create a '
        "ResourceBinding in a namespace with a KarmadaQuota (only Karmada's controllers and "
        "scheduler, karmadaquota and cluster admins may: docs/security.md)"
    )
    assert store.puts == 0


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            lambda b: b["spec"].update(
                requiredBy=[{"name": "x", "clusters": [{"name": "member2", "replicas": 5}]}]
            ),
            "spec.requiredBy",
        ),
        (
            lambda b: b["spec"]["replicaRequirements"]["resourceRequest"].update(cpu="1m"),
            "spec.replicaRequirements",
        ),
        (
            lambda b: b["spec"].update(gracefulEvictionTasks=[{"fromCluster": "member1"}]),
            "spec.gracefulEvictionTasks",
        ),
        (lambda b: b["spec"].update(suspension={"scheduling": True}), "spec.suspension"),
        (lambda b: b["spec"].update(clusters=[]), "spec.clusters"),
        (
            lambda b: (
                b["metadata"]
                .setdefault("annotations", {})
                .update({"quota.karmada.io/queued-by": "q"})
            ),
            "metadata.annotations[quota.karmada.io/queued-by]",
        ),
    ],
)
async def test_a_tenant_may_not_change_what_is_charged_even_downwards(
    setup: Any, change: Any, named: str
) -> None:
    client, _, _ = setup
    old = binding_doc("web", clusters=[("member1", 1)])
    new = copy.deepcopy(old)
    change(new)
    status, body = await post(
        client, "/validate-resourcebinding", review(new, "UPDATE", old, user=TENANT)
    )
    assert status == 200 and body["response"]["allowed"] is False
    message = body["response"]["status"]["message"]
    assert f'user "alice" may not change {named} of a ResourceBinding' in message
    # the same change by Karmada's controllers is charged as usual
    status, body = await post(client, "/validate-resourcebinding", review(new, "UPDATE", old))
    assert body["response"]["allowed"] is True, body


def _meta(change: Any) -> Any:
    return lambda b: change(b["metadata"])


@pytest.mark.parametrize(
    ("change", "named"),
    [
        # issue 34: Karmada finds a binding's Works by this label only; relabelled, the old
        # Works are orphaned and keep running (4 pods under pods=2)
        (
            _meta(
                lambda m: m.setdefault("labels", {}).update(
                    {"resourcebinding.karmada.io/permanent-id": "another"}
                )
            ),
            "metadata.labels[resourcebinding.karmada.io/permanent-id]",
        ),
        (_meta(lambda m: m.setdefault("labels", {}).update(team="a")), "metadata.labels[team]"),
        (
            _meta(lambda m: m.setdefault("annotations", {}).update(note="x")),
            "metadata.annotations[note]",
        ),
        (_meta(lambda m: m.pop("finalizers")), "metadata.finalizers"),
        (_meta(lambda m: m.pop("ownerReferences")), "metadata.ownerReferences"),
        (_meta(lambda m: m.update(generateName="web-")), "metadata.generateName"),
        # a field nobody listed is refused as well: an allow-list
        (lambda b: b.update(extra={"a": 1}), "extra"),
    ],
)
async def test_a_tenant_may_change_nothing_of_a_binding_but_its_status(
    setup: Any, change: Any, named: str
) -> None:
    client, store, _ = setup
    old = binding_doc("web", clusters=[("member1", 1)])
    old["metadata"]["labels"] = {"resourcebinding.karmada.io/permanent-id": "p-1"}
    old["metadata"]["finalizers"] = ["karmada.io/binding-controller"]
    old["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web"}
    ]
    new = copy.deepcopy(old)
    change(new)
    _, body = await post(
        client, "/validate-resourcebinding", review(new, "UPDATE", old, user=TENANT)
    )
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["code"] == 403
    assert body["response"]["status"]["message"] == (
        f'resourcebindings.work.karmada.io "web" is forbidden: user "alice" may not change '
        f"{named} of a ResourceBinding in a namespace with a KarmadaQuota (only Karmada's "
        "controllers and scheduler, karmadaquota and cluster admins may: docs/security.md)"
    )
    # the same change by Karmada's controllers (the GC, a finalizer removed) passes, uncharged
    _, body = await post(client, "/validate-resourcebinding", review(new, "UPDATE", old))
    assert body["response"]["allowed"] is True, body
    assert store.puts == 0


async def test_what_the_api_server_writes_on_every_update_is_no_tenant_s_change(
    setup: Any,
) -> None:
    """No false refusal: a tenant's update that changes nothing (kubectl apply of the same
    object) differs only in what the API server writes itself, and in a status it keeps."""
    client, store, _ = setup
    old = binding_doc("web")
    old["metadata"].update(resourceVersion="7", managedFields=[{"manager": "karmada"}])
    new = copy.deepcopy(old)
    new["metadata"].update(resourceVersion="", generation=2, managedFields=[{"manager": "kubectl"}])
    new["status"] = {"aggregatedStatus": [{"clusterName": "member1"}]}
    new["metadata"]["labels"] = {}  # as absent: the API server omits an empty map
    _, body = await post(
        client, "/validate-resourcebinding", review(new, "UPDATE", old, user=TENANT)
    )
    assert body["response"]["allowed"] is True, body
    assert store.puts == 0


async def test_many_changed_labels_are_named_up_to_ten(setup: Any) -> None:
    client, _, _ = setup
    old = binding_doc("web")
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {f"l{i:02d}": "x" for i in range(25)}
    _, body = await post(
        client, "/validate-resourcebinding", review(new, "UPDATE", old, user=TENANT)
    )
    message = body["response"]["status"]["message"]
    assert "metadata.labels[l09] and 15 more of a ResourceBinding" in message
    assert "l10" not in message


async def test_karmada_removes_its_finalizer_without_the_template_being_read() -> None:
    """A deleting binding whose template is gone and unreadable: Karmada's controller removing
    its finalizer is sent (metadata changed) and must not be refused for what it cannot read,
    or the binding (and the namespace holding it) is never deleted."""

    class Unreachable:
        reads = 0

        async def get(self, path: str) -> Any:
            self.reads += 1
            raise KubeError(503, "ServiceUnavailable", "no template reads today")

    store = Replica(quota_doc(hard={"requests.cpu": "10", "pods": "100"}))
    api = Unreachable()
    templates = TemplateStore(api)  # type: ignore[arg-type]
    webhook = Webhook(store.quota_store(), Batcher(store), WebhookMetrics(), templates=templates)
    client = TestClient(TestServer(build_app(webhook)))
    await client.start_server()
    try:
        old = binding_doc("web", replicas=0)
        old["spec"]["resource"]["resourceVersion"] = "5"  # built from a template version
        old["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        old["metadata"]["finalizers"] = ["karmada.io/binding-controller"]
        new = copy.deepcopy(old)
        new["metadata"]["finalizers"] = []
        _, body = await post(client, "/validate-resourcebinding", review(new, "UPDATE", old))
        assert body["response"]["allowed"] is True, body
        assert api.reads == 0
        # a spec change is charged: it reads the template, and is refused when it cannot
        new["spec"]["resource"]["resourceVersion"] = "6"
        _, body = await post(client, "/validate-resourcebinding", review(new, "UPDATE", old))
        assert body["response"]["allowed"] is False
        assert "no template reads today" in body["response"]["status"]["message"]
    finally:
        await client.close()


async def test_a_tenant_s_dry_run_is_refused_alike(setup: Any) -> None:
    client, _, _ = setup
    dry = review(binding_doc("web"), user=TENANT, dry_run=True)
    _, body = await post(client, "/validate-resourcebinding", dry)
    assert body["response"]["allowed"] is False
    old = binding_doc("web")
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "a"}
    dry = review(new, "UPDATE", old, user=TENANT, dry_run=True)
    _, body = await post(client, "/validate-resourcebinding", dry)
    assert body["response"]["allowed"] is False


async def test_trusted_writers_are_configurable() -> None:
    store = Replica(quota_doc(hard={"requests.cpu": "10", "pods": "100"}))
    writers = Writers.of(["system:serviceaccount:karmada-system:*"], ["karmada-operators"])
    webhook = Webhook(store.quota_store(), Batcher(store), WebhookMetrics(), writers=writers)
    client = TestClient(TestServer(build_app(webhook)))
    await client.start_server()
    try:
        for user, allowed in [
            ({"username": "system:serviceaccount:karmada-system:karmada-cm"}, True),
            ({"username": "bob", "groups": ["karmada-operators"]}, True),
            ({"username": "system:serviceaccount:team-a:default"}, False),
            # naming other groups replaces the default system:masters
            ({"username": "admin", "groups": ["system:masters"]}, False),
        ]:
            body = review(binding_doc("web"), user=user)
            _, resp = await post(client, "/validate-resourcebinding", body)
            assert resp["response"]["allowed"] is allowed, user
    finally:
        await client.close()


OVERRIDES = {"group": "policy.karmada.io", "version": "v1alpha1", "resource": "overridepolicies"}


def override_policy(*paths: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "OverridePolicy",
        "metadata": {"name": "op", "namespace": "ns"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
            "overrideRules": [
                {
                    "overriders": {
                        "plaintext": [{"path": p, "operator": "replace", "value": 5} for p in paths]
                    }
                }
            ],
        },
    }


async def test_a_tenant_may_not_override_what_is_charged(setup: Any) -> None:
    """Issue 29: an OverridePolicy replacing /spec/replicas with 5 ran 5 pods, charged 1."""
    client, _, _ = setup
    doc = override_policy("/metadata/labels/a", "/spec/replicas")
    _, body = await post(
        client, "/validate-overridepolicy", review(doc, resource=OVERRIDES, user=TENANT)
    )
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["message"] == (
        'overridepolicies.policy.karmada.io "op" is forbidden: user "alice" may not write an '
        "override off the allow-list (spec.overrideRules[0].overriders.plaintext[1]: replace "
        "/spec/replicas: not on the allow-list; the platform team extends the list with "
        "--override-allowed-path) in a namespace with a KarmadaQuota (only Karmada's "
        "controllers and scheduler, karmadaquota and cluster admins may: docs/security.md)"
    )
    # a platform admin may; a tenant may override what is on the list
    _, body = await post(client, "/validate-overridepolicy", review(doc, resource=OVERRIDES))
    assert body["response"]["allowed"] is True
    harmless = override_policy("/spec/template/spec/nodeSelector")
    _, body = await post(
        client, "/validate-overridepolicy", review(harmless, resource=OVERRIDES, user=TENANT)
    )
    assert body["response"]["allowed"] is True
    # an update that keeps an override that was there before (a quota added later) passes;
    # one that adds an override off the list does not
    _, body = await post(
        client,
        "/validate-overridepolicy",
        review(doc, "UPDATE", old=doc, resource=OVERRIDES, user=TENANT),
    )
    assert body["response"]["allowed"] is True
    _, body = await post(
        client,
        "/validate-overridepolicy",
        review(doc, "UPDATE", old=harmless, resource=OVERRIDES, user=TENANT),
    )
    assert body["response"]["allowed"] is False


def with_overriders(overriders: dict[str, Any]) -> dict[str, Any]:
    doc = override_policy()
    doc["spec"]["overrideRules"][0]["overriders"] = overriders
    return doc


# issue 34: each passed before, and each ran more in the members than the quota's hard
ATTACKS = {
    "renamed": with_overriders(
        {"plaintext": [{"path": "/metadata/name", "operator": "replace", "value": "web-2"}]}
    ),
    "moved": with_overriders(
        {"plaintext": [{"path": "/metadata/namespace", "operator": "replace", "value": "b"}]}
    ),
    "image predicate on cpu": with_overriders(
        {
            "imageOverrider": [
                {
                    "predicate": {
                        "path": "/spec/template/spec/containers/0/resources/requests/cpu"
                    },
                    "component": "Tag",
                    "operator": "replace",
                    "value": "2",
                }
            ]
        }
    ),
    "surge": with_overriders(
        {
            "plaintext": [
                {
                    "path": "/spec/strategy",
                    "operator": "replace",
                    "value": {"rollingUpdate": {"maxSurge": "100%"}},
                },
                {"path": "/spec/minReadySeconds", "operator": "add", "value": 3600},
            ]
        }
    ),
    "unknown overrider": with_overriders({"replicasOverrider": [{"value": 5}]}),
}
EVERYDAY = {
    "image": with_overriders(
        {"imageOverrider": [{"component": "Registry", "operator": "replace", "value": "r.io"}]}
    ),
    "label": with_overriders({"labelsOverrider": [{"operator": "add", "value": {"team": "a"}}]}),
    "command and args": with_overriders(
        {
            "commandOverrider": [{"containerName": "app", "operator": "add", "value": ["-v"]}],
            "argsOverrider": [{"containerName": "app", "operator": "add", "value": ["-x"]}],
        }
    ),
    "env": override_policy("/spec/template/spec/containers/0/env"),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
async def test_issue_34s_overrides_are_refused_naming_the_rule(setup: Any, name: str) -> None:
    client, _, _ = setup
    _, body = await post(
        client, "/validate-overridepolicy", review(ATTACKS[name], resource=OVERRIDES, user=TENANT)
    )
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["reason"] == "Forbidden"
    message = body["response"]["status"]["message"]
    assert 'user "alice" may not write an override off the allow-list' in message
    assert "spec.overrideRules[0].overriders." in message


@pytest.mark.parametrize("name", sorted(EVERYDAY))
async def test_everyday_overrides_are_the_tenants_to_write(setup: Any, name: str) -> None:
    client, _, _ = setup
    _, body = await post(
        client, "/validate-overridepolicy", review(EVERYDAY[name], resource=OVERRIDES, user=TENANT)
    )
    assert body["response"]["allowed"] is True, body


# what stays refused where guards bound the namespace: a move out of it, a rename onto another
# object's name, an overrider nobody can judge
REFUSED_UNDER_GUARDS = {"renamed", "moved", "unknown overrider"}


@pytest.mark.parametrize("name", sorted(ATTACKS))
async def test_where_guards_bound_the_namespace_an_override_is_refused_only_for_a_move(
    name: str,
) -> None:
    """Issue 42: where every quota of the namespace keeps member guards (the default), what an
    override makes the members run is bounded there; admission refuses only what would leave
    the guards' namespace or name, and what it cannot read."""
    store = Replica(quota_doc(hard={"requests.cpu": "10", "pods": "100"}))
    webhook = Webhook(store.quota_store(), Batcher(store), WebhookMetrics())
    req = review_mod.parse(
        json.dumps(review(ATTACKS[name], resource=OVERRIDES, user=TENANT)).encode()
    )
    assert (await webhook.admit_override(req)).allowed is (name not in REFUSED_UNDER_GUARDS)


SERVICE_TYPE = {
    "apiVersion": "policy.karmada.io/v1alpha1",
    "kind": "OverridePolicy",
    "metadata": {"name": "svc", "namespace": "ns"},
    "spec": {
        "resourceSelectors": [{"apiVersion": "v1", "kind": "Service", "name": "web"}],
        "overrideRules": [
            {
                "overriders": {
                    "plaintext": [
                        {"path": "/spec/type", "operator": "replace", "value": "LoadBalancer"}
                    ]
                }
            }
        ],
    },
}
INGRESS_HOST = {
    "apiVersion": "policy.karmada.io/v1alpha1",
    "kind": "OverridePolicy",
    "metadata": {"name": "ing", "namespace": "ns"},
    "spec": {
        "resourceSelectors": [
            {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": "web"}
        ],
        "overrideRules": [
            {
                "targetCluster": {"clusterNames": ["member1"]},
                "overriders": {
                    "plaintext": [
                        {"path": "/spec/rules/0/host", "operator": "replace", "value": "m1.a.io"}
                    ]
                },
            }
        ],
    },
}


@pytest.mark.parametrize(
    ("hard", "doc", "admitted"),
    [
        ({"pods": "10"}, SERVICE_TYPE, True),
        ({"pods": "10"}, INGRESS_HOST, True),
        ({"services.loadbalancers": "1"}, SERVICE_TYPE, False),  # the name the quota tracks
        ({"services.loadbalancers": "1"}, INGRESS_HOST, True),
    ],
)
async def test_an_override_of_kinds_that_run_no_pods_is_judged_by_the_names_tracked(
    hard: dict[str, str], doc: dict[str, Any], admitted: bool
) -> None:
    """Issue 42: a Service's `/spec/type` and an Ingress's host were refused "not on the
    allow-list" by a quota admission alone enforces; neither runs a pod."""
    store = Replica(quota_doc(hard=hard, member_enforcement="None"))
    webhook = Webhook(store.quota_store(), Batcher(store), WebhookMetrics())
    req = review_mod.parse(json.dumps(review(doc, resource=OVERRIDES, user=TENANT)).encode())
    decision = await webhook.admit_override(req)
    assert decision.allowed is admitted, decision.message
    renamed = copy.deepcopy(doc)
    renamed["spec"]["overrideRules"][0]["overriders"]["plaintext"][0]["path"] = "/metadata/name"
    req = review_mod.parse(json.dumps(review(renamed, resource=OVERRIDES, user=TENANT)).encode())
    assert not (await webhook.admit_override(req)).allowed


async def test_the_platform_team_extends_the_override_allow_list() -> None:
    """--override-allowed-path (WebhookConfig.allowed_overrides): one more plaintext path."""
    store = Replica(quota_doc(hard={"pods": "100"}, member_enforcement="None"))
    doc = override_policy("/spec/template/spec/priorityClassName")
    for allowed, admitted in [
        (None, False),
        (AllowList.extended(["/spec/template/spec/priorityClassName"]), True),
    ]:
        webhook = Webhook(
            store.quota_store(), Batcher(store), WebhookMetrics(), allowed_overrides=allowed
        )
        req = review_mod.parse(json.dumps(review(doc, resource=OVERRIDES, user=TENANT)).encode())
        assert (await webhook.admit_override(req)).allowed is admitted


def test_the_override_allowed_path_flag_reaches_the_allow_list(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parse = cli._parser().parse_args
    base = ["webhook", "--tls-cert-file=c", "--tls-private-key-file=k"]
    path = "/spec/template/spec/priorityClassName"
    doc = override_policy(path)
    assert refusals(doc, cli.webhook_config(parse(base)).allowed_overrides)
    for flags in (
        [f"--override-allowed-path={path}"],
        [f"--override-allowed-path=/spec/x,{path}"],
        ["--override-allowed-path=/spec/x", f"--override-allowed-path={path}"],
    ):
        config = cli.webhook_config(parse([*base, *flags]))
        assert refusals(doc, config.allowed_overrides) == [], flags
    with pytest.raises(SystemExit):
        parse([*base, "--override-allowed-path=spec/replicas"])
    assert "must be a JSON pointer below the root" in capsys.readouterr().err


CLUSTER_OVERRIDES = {**OVERRIDES, "resource": "clusteroverridepolicies"}


def cluster_policy(*namespaces: str) -> dict[str, Any]:
    doc = ATTACKS["renamed"]
    return {
        **doc,
        "kind": "ClusterOverridePolicy",
        "metadata": {"name": "cop"},
        "spec": {
            **doc["spec"],
            "resourceSelectors": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": n} for n in namespaces
            ],
        },
    }


async def test_a_cluster_override_policy_is_held_to_the_list_where_it_may_apply(
    setup: Any,
) -> None:
    """A ClusterOverridePolicy applies in every namespace its selectors name (all of them
    without one): an untrusted writer (karmada-edit does not grant it; a platform's GitOps
    identity might) is held to the allow-list where it may reach a quota; trusted ones never."""
    client, _, _ = setup

    async def admitted(doc: dict[str, Any], user: dict[str, Any] = TENANT) -> bool:
        body = review(doc, resource=CLUSTER_OVERRIDES, user=user)
        body["request"]["namespace"] = ""
        _, got = await post(client, "/validate-overridepolicy", body)
        return bool(got["response"]["allowed"])

    assert not await admitted(cluster_policy())  # every namespace, "ns" has a quota
    assert not await admitted(cluster_policy("ns"))
    assert not await admitted(cluster_policy("free", "ns"))
    assert await admitted(cluster_policy("free"))  # no quota there: not ours
    assert await admitted(cluster_policy("free", "../x"))  # no namespace has that name
    assert await admitted(cluster_policy("ns"), CONTROLLER_MANAGER)
    everyday = {**cluster_policy(), "spec": {**EVERYDAY["label"]["spec"]}}
    assert await admitted(everyday)
    body = review(cluster_policy(), resource=CLUSTER_OVERRIDES, user=TENANT)
    _, got = await post(client, "/validate-overridepolicy", body)
    assert got["response"]["status"]["message"].startswith(
        'clusteroverridepolicies.policy.karmada.io "cop" is forbidden: user "alice" may not '
        "write an override off the allow-list (spec.overrideRules[0].overriders.plaintext[0]: "
        "replace /metadata/name: not on the allow-list"
    )


async def test_no_quota_anywhere_leaves_cluster_override_policies_alone() -> None:
    body = review(cluster_policy(), resource=CLUSTER_OVERRIDES, user=TENANT)
    body["request"]["namespace"] = ""
    req = review_mod.parse(json.dumps(body).encode())
    elsewhere = Replica(quota_doc(namespace="other", hard={"pods": "1"}))
    webhook = Webhook(elsewhere.quota_store(), Batcher(elsewhere), WebhookMetrics())
    assert not (await webhook.admit_override(req)).allowed
    none = QuotaStore(FakeApiServer())
    none.synced.set()
    webhook = Webhook(none, Batcher(elsewhere), WebhookMetrics())
    assert (await webhook.admit_override(req)).allowed


async def test_overrides_in_a_namespace_without_quota_are_not_ours(setup: Any) -> None:
    client, _, _ = setup
    doc = override_policy("/spec/replicas")
    doc["metadata"]["namespace"] = "elsewhere"
    _, body = await post(
        client, "/validate-overridepolicy", review(doc, resource=OVERRIDES, user=TENANT)
    )
    assert body["response"]["allowed"] is True
    status, _ = await post(client, "/validate-overridepolicy", review(doc, resource=BINDINGS))
    assert status == 400


# ---- fail closed on every unknown ------------------------------------------------------------


def live_webhook(api: FakeApiServer, cache: QuotaStore) -> Webhook:
    """A webhook as `app.run` wires it: the batcher reads the one quota store."""
    backend = KubeQuotaBackend(api, cache)
    return Webhook(cache, Batcher(backend), WebhookMetrics())


async def test_a_quota_missing_from_the_cache_is_read_live() -> None:
    """The watch has not delivered a quota created a moment ago: the webhook reads the
    namespace's quotas live (as Kubernetes' quota admission does on a miss) instead of
    admitting as if there were none."""
    api = FakeApiServer()
    cache = QuotaStore(api)
    cache.synced.set()
    api.add_quota(quota_doc(namespace="late", hard={"requests.cpu": "1"}))
    webhook = live_webhook(api, cache)
    refused = await webhook.admit_binding(
        review_mod.parse(json.dumps(review(binding_doc("web", namespace="late", cpu="5"))).encode())
    )
    assert not refused.allowed and refused.message.startswith("exceeded quota: team-a,")
    assert cache.has("late")  # folded in: the next review needs no read
    await webhook.batcher.close()


async def test_a_failed_live_read_refuses_never_admits_unchecked() -> None:
    api = FakeApiServer()
    api.refuse[paths.quotas("late")] = KubeError(500, "InternalError", "etcd timed out")
    cache = QuotaStore(api)
    cache.synced.set()
    webhook = live_webhook(api, cache)
    d = await webhook.admit_binding(
        review_mod.parse(json.dumps(review(binding_doc("web", namespace="late"))).encode())
    )
    assert not d.allowed and d.reason == "ServiceUnavailable"
    assert "cannot tell whether namespace late holds a quota" in d.message


class Hanging:
    """An API client whose reads never answer (within a test's time)."""

    async def get(self, path: str, params: Any = None) -> dict[str, Any]:
        await asyncio.sleep(60)
        raise AssertionError("never answered")


async def test_a_live_read_that_hangs_refuses_within_the_review_s_budget() -> None:
    """The API server waits 1 s for the review: a live read that never answers refuses before
    that (fail closed), not after the client's own 10 s."""
    api = FakeApiServer()
    cache = QuotaStore(api)
    cache.synced.set()

    cache._client = Hanging()  # type: ignore[assignment]
    webhook = live_webhook(api, cache)
    started = time.monotonic()
    d = await webhook.admit_binding(
        review_mod.parse(json.dumps(review(binding_doc("web", namespace="late"))).encode()),
        budget=0.5,
    )
    assert time.monotonic() - started < 1.0
    assert not d.allowed and d.reason == "ServiceUnavailable"
    assert "live read failed: no answer within 0.5s" in d.message, d.message
    await webhook.batcher.close()


async def test_an_unreadable_quota_refuses_bindings_in_its_namespace_naming_it() -> None:
    """Skipping a quota that cannot be parsed would admit whatever it limits (fail open)."""
    api = FakeApiServer()
    cache = QuotaStore(api)
    cache.synced.set()
    bad = quota_doc("broken", rv=3)
    bad["spec"]["hard"] = "not a map"
    cache.added(bad)
    cache.added(quota_doc("fine", rv=4))
    webhook = live_webhook(api, cache)
    d = await webhook.admit_binding(
        review_mod.parse(json.dumps(review(binding_doc("web"))).encode())
    )
    assert not d.allowed and d.reason == "Forbidden"
    assert d.message.startswith("KarmadaQuota broken in namespace ns cannot be read")
    await webhook.batcher.close()
