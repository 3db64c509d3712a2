"""The admission webhook end to end: real karmada-apiserver, real ValidatingWebhookConfiguration,
real HTTPS, Karmada's own controllers creating the bindings, our controller keeping `used`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from e2e.testbed import TestBed, product, tenant
from e2e.testbed.aio import eventually
from e2e.testbed.storm import binding, retryable, storm
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.api import KarmadaQuota, Reservation
from karmadaquota.kube.client import JSON, KubeClient, KubeError
from karmadaquota.quantity import Quantity

pytestmark = pytest.mark.e2e

CPU = {"cpu": "250m"}
RB_PATH = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"
# Long on purpose: reservations of creates that failed after admission must be released by
# the controller's orphan audit (seconds), not by expiry.
RESERVATION_TTL_S = 120


@pytest.fixture(scope="module")
async def webhook(testbed: TestBed) -> AsyncIterator[product.WebhookProc]:
    """CRD + controller + webhook, registered in karmada-apiserver for the module."""
    await asyncio.to_thread(product.install_crd, testbed)
    controller, _ = product.start_controller(testbed, "controller-webhook-suite")
    # every decision logged: the tests below count one namespace's reviews (`decisions`)
    hook = await product.start_webhook(
        testbed, "webhook-a", ttl=f"{RESERVATION_TTL_S}s", log_level="debug"
    )
    try:
        await asyncio.to_thread(product.register, testbed, hook.base, hook.ca_bundle)
        yield hook
    finally:
        await asyncio.to_thread(product.unregister, testbed)
        hook.proc.stop()
        controller.stop()


@pytest.fixture(scope="module")
async def api(testbed: TestBed) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    yield client
    await client.close()


async def create_quota(bed: TestBed, ns: str, name: str, hard: dict[str, str], **spec: Any) -> None:
    await bed.aapply(product.quota(ns, name, hard, **spec))

    def initialised() -> bool:
        q = bed.get("karmadaquota", name, namespace=ns)
        status = (q or {}).get("status", {})
        conditions = {c["type"]: c for c in status.get("conditions", [])}
        # used known AND the namespace labelled (the registration's namespaceSelector): the
        # controller writes `used` a moment before it labels, and a binding created between
        # the two is never reviewed
        return (
            set(hard) <= set(status.get("used", {}))
            and conditions.get("Enforced", {}).get("status") == "True"
        )

    await eventually(initialised, 30, f"{ns}/{name}'s status.used initialised and enforced")


def used(bed: TestBed, ns: str, name: str, resource: str) -> Quantity:
    q = bed.get("karmadaquota", name, namespace=ns) or {}
    return Quantity.parse(str(q.get("status", {}).get("used", {}).get(resource, "0")))


def reservations(bed: TestBed, ns: str, name: str) -> list[Reservation]:
    """The quota's pending charges, decoded (status.pending, or an old layout)."""
    return held(bed.get("karmadaquota", name, namespace=ns) or {})


def held(q: dict[str, Any]) -> list[Reservation]:
    return KarmadaQuota.model_validate(q).status.reservations if q else []


def member_replicas(bed: TestBed, ns: str, name: str) -> int:
    total = 0
    for m in bed.members:
        d = bed.get("deployment", name, cluster=m, namespace=ns)
        total += int(d["spec"]["replicas"]) if d else 0
    return total


def events_for(bed: TestBed, ns: str, name: str) -> str:
    events = bed.get("events", namespace=ns) or {"items": []}
    return "\n".join(
        e.get("message", "")
        for e in events["items"]
        if e.get("involvedObject", {}).get("name") == name
    )


@pytest.mark.smoke
async def test_quota_admits_refuses_and_blocks_scale_up_of_real_deployments(
    testbed: TestBed, webhook: product.WebhookProc, namespace: str
) -> None:
    ns, members = namespace, list(testbed.members)
    await create_quota(testbed, ns, "team", {"requests.cpu": "1", "pods": "10"})

    await testbed.aapply([deployment(ns, "web", 2, CPU), divided_policy(ns, "web", members, "web")])
    await eventually(
        lambda: member_replicas(testbed, ns, "web") == 2, 90, "web propagated to the members"
    )
    await eventually(
        lambda: used(testbed, ns, "team", "requests.cpu") == Quantity.parse("500m"),
        30,
        "usage of web counted",
    )
    # Karmada's detector may race itself creating the binding (AlreadyExists after our
    # admission): the controller releases such a reservation within seconds, not at expiry
    await eventually(
        lambda: not reservations(testbed, ns, "team"), 30, "no reservation left for web"
    )

    # 500m used + 3 × 250m > 1 cpu: the binding is refused and the user is told why
    await testbed.aapply([deployment(ns, "big", 3, CPU), divided_policy(ns, "big", members, "big")])
    message = await eventually(
        lambda: (
            "exceeded quota" in events_for(testbed, ns, "big") and events_for(testbed, ns, "big")
        ),
        60,
        "an event on Deployment big explaining the refusal",
    )
    assert "exceeded quota: team, requested: requests.cpu=750m, used: requests.cpu=500m" in message
    assert "limited: requests.cpu=1" in message
    assert testbed.get("resourcebinding", "big-deployment", namespace=ns) is None

    # scale-up past the limit: refused, the member Deployments keep their replicas
    await testbed.akubectl("scale", "deployment/web", "--replicas=5", "-n", ns)
    await eventually(
        lambda: "requested: requests.cpu=750m" in events_for(testbed, ns, "web"),
        60,
        "an event on Deployment web explaining the refused scale-up",
    )
    rb = testbed.get("resourcebinding", "web-deployment", namespace=ns)
    assert rb is not None and rb["spec"]["replicas"] == 2
    assert member_replicas(testbed, ns, "web") == 2
    # the admitted charge is in `used` once the controller folds it (within a second)
    await eventually(
        lambda: used(testbed, ns, "team", "requests.cpu") == Quantity.parse("500m"),
        30,
        "used: the 2 admitted replicas, nothing of the refused scale-up",
    )


async def test_scoped_quotas_charge_only_matching_bindings_and_all_must_admit(
    testbed: TestBed, webhook: product.WebhookProc, api: KubeClient, namespace: str
) -> None:
    ns = namespace
    high = {
        "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]
    }
    await create_quota(testbed, ns, "high", {"pods": "2"}, scopeSelector=high)
    await create_quota(testbed, ns, "best-effort", {"pods": "1"}, scopes=["BestEffort"])
    await create_quota(testbed, ns, "all", {"pods": "3"})
    path = RB_PATH.format(ns=ns)

    def rb(name: str, cpu: str | None, pc: str = "") -> dict[str, Any]:
        b = binding(ns, name)
        req = b["spec"]["replicaRequirements"]
        req["resourceRequest"] = {"cpu": cpu} if cpu else {}
        if pc:
            req["priorityClassName"] = pc
        return b

    await api.post(path, rb("h1", "100m", "high"))
    await api.post(path, rb("h2", "100m", "high"))
    with pytest.raises(KubeError, match="exceeded quota: high, requested: pods=1, used: pods=2"):
        await api.post(path, rb("h3", "100m", "high"))
    await api.post(path, rb("low", "100m", "low"))  # not charged to "high"
    with pytest.raises(KubeError, match="exceeded quota: all, requested: pods=1, used: pods=3"):
        await api.post(path, rb("be", None))  # best-effort admits it, "all" does not
    assert not reservations(testbed, ns, "best-effort")  # the refused request reserved nothing


@pytest.mark.smoke
async def test_storm_admits_exactly_what_fits(
    testbed: TestBed, webhook: product.WebhookProc, api: KubeClient, namespace: str
) -> None:
    await storm_and_check(testbed, api, namespace)


async def test_storm_with_two_webhook_replicas_behind_one_address(
    testbed: TestBed, webhook: product.WebhookProc, api: KubeClient, namespace: str
) -> None:
    second = await product.start_webhook(testbed, "webhook-b", ttl=f"{RESERVATION_TTL_S}s")
    try:
        with product.round_robin_proxy(testbed, [webhook.port, second.port]) as port:
            base = f"https://127.0.0.1:{port}"
            await asyncio.to_thread(product.register, testbed, base, webhook.ca_bundle)
            try:
                await storm_and_check(testbed, api, namespace)
                served_b = await second.metrics()
                served_a = await webhook.metrics()
                assert _admissions(served_a) > 0 and _admissions(served_b) > 0, "both served"
            finally:
                await asyncio.to_thread(product.register, testbed, webhook.base, webhook.ca_bundle)
    finally:
        second.proc.stop()


def _admissions(metrics: str) -> float:
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("karmadaquota_admission_duration_seconds_count"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def storm_and_check(bed: TestBed, api: KubeClient, ns: str) -> None:
    """500 concurrent creates of 100m against 30 cpu: exactly 300 admitted, usage exact.

    Refusals that decided nothing (the webhook's own 'try again': its review deadline, a lost
    compare-and-swap) are retried as Karmada's controllers retry them; every final refusal
    must be the quota's."""
    await create_quota(bed, ns, "storm", {"requests.cpu": "30"})
    result = await storm(
        api,
        RB_PATH.format(ns=ns),
        lambda i: binding(ns, f"rb-{i:03d}"),
        500,
        deadline=120,
        retry=retryable,
    )
    assert len(result.admitted) == 300, result.summary()
    assert all("exceeded quota: storm" in m for m in result.denied.values()), set(
        result.denied.values()
    )
    listed = await api.get(RB_PATH.format(ns=ns))
    assert len(listed["items"]) == 300

    def settled() -> bool:
        q = bed.get("karmadaquota", "storm", namespace=ns) or {}
        st = q.get("status", {})
        return st.get("used", {}).get("requests.cpu") == "30" and not held(q)

    await eventually(settled, 30, "used == sum of admitted bindings and no reservation left")


async def test_dry_run_is_answered_and_reserves_nothing(
    testbed: TestBed, webhook: product.WebhookProc, namespace: str
) -> None:
    ns = namespace
    await create_quota(testbed, ns, "q", {"requests.cpu": "1"})
    doc = json.dumps(binding(ns, "dry", cpu="1"))
    await testbed.akubectl("create", "--dry-run=server", "-f", "-", input=doc)
    assert not reservations(testbed, ns, "q")
    over = json.dumps(binding(ns, "dry2", cpu="2"))
    proc = await testbed.akubectl("create", "--dry-run=server", "-f", "-", input=over, check=False)
    assert proc.returncode != 0 and "exceeded quota: q" in proc.stderr


async def test_invalid_quota_is_rejected_with_kubernetes_wording(
    testbed: TestBed, webhook: product.WebhookProc, namespace: str
) -> None:
    bad = product.quota(namespace, "bad", {"nvidia.com/gpu": "1"})
    proc = await testbed.akubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert proc.returncode != 0
    assert 'spec.hard[nvidia.com/gpu]: Invalid value: "nvidia.com/gpu"' in proc.stderr
    limits = product.quota(namespace, "limits", {"limits.nvidia.com/gpu": "1"})
    proc = await testbed.akubectl("apply", "-f", "-", input=json.dumps(limits), check=False)
    assert proc.returncode != 0  # CEL
    assert "limits may be limits.cpu, limits.memory or limits.ephemeral-storage" in proc.stderr


@contextlib.asynccontextmanager
async def another_webhook(
    bed: TestBed,
    name: str,
    decide: Callable[[dict[str, Any]], Awaitable[str | None]],
    timeout_seconds: int = 3,
) -> AsyncIterator[None]:
    """Another validating webhook on bindings, next to ours: `decide(labels)` returns a refusal
    message, or None to allow."""

    async def review(request: web.Request) -> web.Response:
        body = await request.json()
        req = body["request"]
        labels = (req.get("object") or {}).get("metadata", {}).get("labels", {})
        refusal = await decide(labels)
        resp: dict[str, Any] = {"uid": req["uid"], "allowed": refusal is None}
        if refusal is not None:
            resp["status"] = {"code": 403, "message": refusal}
        return web.json_response({**body, "response": resp})

    cert = bed.serving_cert(name)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert.cert, cert.key)
    app = web.Application()
    app.router.add_post("/", review)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = runner.addresses[0][1]
    await asyncio.to_thread(
        bed.register_validating_webhook,
        name,
        f"https://127.0.0.1:{port}/",
        cert.ca_bundle,
        product.BINDING_RULES,
        timeout_seconds=timeout_seconds,
    )
    try:
        yield
    finally:
        await asyncio.to_thread(bed.unregister_validating_webhook, name)
        await runner.cleanup()


@pytest.fixture
async def refusing_webhook(testbed: TestBed) -> AsyncIterator[None]:
    """Refuses bindings labelled refuse=yes (after ours admits)."""

    async def decide(labels: dict[str, Any]) -> str | None:
        return "refused by another webhook" if labels.get("refuse") == "yes" else None

    async with another_webhook(testbed, "refuser", decide):
        yield


SLOW_S = 8.0  # longer than the orphan audit's 2 s grace, shorter than the admission window


@pytest.fixture
async def slow_webhook(testbed: TestBed) -> AsyncIterator[None]:
    """Takes SLOW_S to allow bindings labelled slow=yes (timeoutSeconds 10)."""

    async def decide(labels: dict[str, Any]) -> str | None:
        if labels.get("slow") == "yes":
            await asyncio.sleep(SLOW_S)  # models a slow webhook, not synchronisation
        return None

    async with another_webhook(testbed, "slow", decide, timeout_seconds=10):
        yield


async def test_a_create_still_waiting_on_another_webhook_keeps_its_reservation(
    testbed: TestBed,
    webhook: product.WebhookProc,
    api: KubeClient,
    namespace: str,
    slow_webhook: None,
) -> None:
    """Ours admits at once; another validating webhook holds the create for 8 s. The orphan
    audit finds the binding's name free after 2 s, but the create is still in flight: its
    reservation must hold until it is stored, or another create takes the same quota and the
    live bindings pass `hard`."""
    ns, path = namespace, RB_PATH.format(ns=namespace)
    await create_quota(testbed, ns, "q", {"requests.cpu": "1"})
    slow = binding(ns, "slow", cpu="1")
    slow["metadata"]["labels"] = {"slow": "yes"}
    in_flight = asyncio.create_task(api.post(path, slow))
    await eventually(
        lambda: [r.reservedBy.name for r in reservations(testbed, ns, "q")] == ["slow"],
        10,
        "the slow create's reservation",
    )
    reserved_at, attempts = time.monotonic(), 0
    while not in_flight.done():
        attempts += 1
        with pytest.raises(KubeError, match="exceeded quota: q"):
            await api.post(path, binding(ns, f"other-{attempts}", cpu="1"))
        await asyncio.wait({in_flight}, timeout=0.25)  # paces the attempts
    await in_flight
    assert time.monotonic() - reserved_at > 3.0, "attempts covered the audit's 2 s grace"
    live = await api.get(path)
    assert [b["metadata"]["name"] for b in live["items"]] == ["slow"]
    await eventually(
        lambda: (
            used(testbed, ns, "q", "requests.cpu") == Quantity.parse("1")
            and not reservations(testbed, ns, "q")
        ),
        30,
        "the slow binding counted in used, its reservation gone",
    )


async def test_admitted_then_refused_elsewhere_is_released_long_before_the_ttl(
    testbed: TestBed,
    webhook: product.WebhookProc,
    api: KubeClient,
    namespace: str,
    refusing_webhook: None,
) -> None:
    ns = namespace
    await create_quota(testbed, ns, "q", {"requests.cpu": "1"})
    refused = binding(ns, "refused", cpu="1")
    refused["metadata"]["labels"] = {"refuse": "yes"}
    with pytest.raises(KubeError, match="refused by another webhook"):
        await api.post(RB_PATH.format(ns=ns), refused)
    # our webhook admitted and reserved it: the whole cpu is held by a reservation now
    assert [r.reservedBy.name for r in reservations(testbed, ns, "q")] == ["refused"]
    with pytest.raises(KubeError, match="exceeded quota: q"):
        await api.post(RB_PATH.format(ns=ns), binding(ns, "next", cpu="1"))

    async def admitted_again() -> bool:
        try:
            await api.post(RB_PATH.format(ns=ns), binding(ns, "next", cpu="1"))
        except KubeError as e:
            if "exceeded quota" in e.message:
                return False
            raise
        return True

    started = time.monotonic()
    await eventually(admitted_again, 30, "quota free again")
    assert time.monotonic() - started < RESERVATION_TTL_S / 4


LIMITED = """
apiVersion: apiserver.config.k8s.io/v1
kind: ResourceQuotaConfiguration
limitedResources:
- resource: resourcebindings
  matchScopes:
  - {scopeName: PriorityClass, operator: In, values: [critical]}
"""


async def test_limited_resources_need_a_covering_quota(
    testbed: TestBed,
    webhook: product.WebhookProc,
    api: KubeClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    """With limitedResources, class `critical` is consumable only where a quota scoped to
    PriorityClass exists — as Kubernetes' ResourceQuotaConfiguration does for pods."""
    config = tmp_path / "limited.yaml"
    config.write_text(LIMITED)
    limited = await product.start_webhook(
        testbed, "webhook-limited", "60s", False, f"--limited-resources={config}"
    )
    ns, path = namespace, RB_PATH.format(ns=namespace)

    def critical(name: str) -> dict[str, Any]:
        b = binding(ns, name)
        b["spec"]["replicaRequirements"]["priorityClassName"] = "critical"
        return b

    try:
        await asyncio.to_thread(product.register, testbed, limited.base, limited.ca_bundle)
        await create_quota(testbed, ns, "plain", {"pods": "10"})
        with pytest.raises(
            KubeError,
            match=r"insufficient quota to match these scopes: "
            r"\[\{PriorityClass In \[critical\]\}\]",
        ):
            await api.post(path, critical("c1"))
        await api.post(path, binding(ns, "ordinary"))  # other classes are not limited
        scoped = {
            "matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["critical"]}
            ]
        }
        await create_quota(testbed, ns, "critical", {"pods": "1"}, scopeSelector=scoped)
        await api.post(path, critical("c2"))
    finally:
        await asyncio.to_thread(product.register, testbed, webhook.base, webhook.ca_bundle)
        limited.proc.stop()


async def test_negative_requests_are_refused_and_never_lower_usage(
    testbed: TestBed, webhook: product.WebhookProc, api: KubeClient, namespace: str
) -> None:
    """The hostile tenant's attack, through the real karmada-apiserver: a binding asking for
    `cpu: -4` must not be admitted, and one that got in before the quota existed must not lower
    `used` (it is charged as zero and named on the quota)."""
    ns, path = namespace, RB_PATH.format(ns=namespace)

    def rb(name: str, cpu: str) -> dict[str, Any]:
        doc = binding(ns, name, cpu=cpu)
        doc["spec"]["replicaRequirements"]["resourceRequest"]["memory"] = "1Gi"
        return doc

    # Before any quota exists the webhook charges nothing, as for a binding created before the
    # webhook was installed.
    await api.post(path, rb("early-neg", "-4"))
    await create_quota(testbed, ns, "q", {"requests.cpu": "2", "requests.memory": "4Gi"})

    def reported() -> bool:
        q = testbed.get("karmadaquota", "q", namespace=ns) or {}
        conds = {c["type"]: c for c in q.get("status", {}).get("conditions", [])}
        return "early-neg" in conds.get("BindingsCharged", {}).get("message", "")

    await eventually(reported, 30, "the quota names the binding charged as zero")
    assert used(testbed, ns, "q", "requests.cpu") == Quantity.parse("0")
    assert used(testbed, ns, "q", "requests.memory") == Quantity.parse("1Gi")

    with pytest.raises(KubeError) as refused:
        await api.post(path, rb("neg", "-4"))
    assert (
        'spec.replicaRequirements.resourceRequest[cpu]: Invalid value: "-4": '
        "must be greater than or equal to 0"
    ) in str(refused.value)
    with pytest.raises(KubeError) as over:
        await api.post(path, rb("three", "3"))
    assert "exceeded quota: q, requested: requests.cpu=3" in str(over.value)
    await api.post(path, rb("two", "2"))  # exactly the room there is
    with pytest.raises(KubeError) as full:
        await api.post(path, rb("more", "1m"))
    assert "exceeded quota: q" in str(full.value)


async def test_status_and_no_op_updates_never_reach_the_webhook(
    testbed: TestBed, webhook: product.WebhookProc, api: KubeClient, namespace: str
) -> None:
    """The registration's matchConditions, evaluated by karmada-apiserver itself: a status
    write (Karmada's most frequent) and an update that changes nothing are not sent to us, nor
    is a cluster admin's update of metadata alone (Karmada's finalizer, added after each create
    and removed on deletion: a webhook outage must not hold deletions up). The tenant's change
    of a label, an annotation or a finalizer is sent — and refused (karmadaquota.trust) — and
    so is a cluster admin's replica change, refused over the quota.

    Counted precisely: the reviews of this one binding, from the webhook's decision log (the
    review histogram is no measure here: it counts every review the replica answers, of
    quotas and OverridePolicies too, in every namespace)."""
    ns = namespace
    await tenant.grant(testbed, ns)
    alice = tenant.impersonating(api)
    await create_quota(testbed, ns, "team", {"requests.cpu": "1"})
    path = RB_PATH.format(ns=ns)
    await api.post(path, binding(ns, "b", cpu="500m"))
    item = f"{path}/b"
    assert product.decisions(webhook, ns, "b") == 1  # its CREATE
    admin_metadata: list[JSON] = [
        {"metadata": {"labels": {"team": "a"}}},
        {"metadata": {"annotations": {"note": "x"}}},
        {"metadata": {"finalizers": ["example.com/keep"]}},
        {"metadata": {"finalizers": None}},
        {"metadata": {"labels": {"team": None}}},
    ]
    for change in admin_metadata:
        await api.merge_patch(item, change)  # a cluster admin's: stored, not sent
    for i in range(10):
        await api.merge_patch(f"{item}/status", {"status": {"schedulerObservedGeneration": i}})
        await api.merge_patch(item, {"metadata": {"labels": {"team": "a"}}})  # as it is
        await api.put(item, await api.get(item))  # written back unchanged
    assert product.decisions(webhook, ns, "b") == 1, "status, no-op or admin metadata was sent"
    tenants: list[JSON] = [
        {"metadata": {"labels": {"team": "b"}}},
        {"metadata": {"annotations": {"note": "y"}}},
        {"metadata": {"finalizers": ["example.com/keep"]}},
    ]
    for n, change in enumerate(tenants, start=2):
        with pytest.raises(KubeError, match=r'user "alice" may not change metadata\.'):
            await alice.merge_patch(item, change)
        assert product.decisions(webhook, ns, "b") == n, change
    with pytest.raises(KubeError, match=r"exceeded quota: team, requested: requests\.cpu=1"):
        await api.merge_patch(item, {"spec": {"replicas": 3}})
    assert product.decisions(webhook, ns, "b") == 2 + len(tenants)
    await alice.close()


async def test_only_namespaces_with_a_quota_call_the_webhook_and_enforcement_starts_with_it(
    testbed: TestBed, webhook: product.WebhookProc, api: KubeClient, namespace: str
) -> None:
    """No call where nothing is enforced: bindings of a namespace without a KarmadaQuota never
    reach the webhook (its namespaceSelector). The window between a quota's creation and its
    enforcement: the controller labels the namespace as soon as it sees the quota (a review has
    no side effect), within a second; Enforced says when it is."""
    ns = namespace
    path = RB_PATH.format(ns=ns)
    for i in range(10):
        await api.post(path, binding(ns, f"free-{i}", cpu="1"))
    # this namespace's reviews (the review histogram also counts other namespaces' reviews)
    assert product.decisions(webhook, ns) == 0, "a namespace without quota was sent"
    labels = (await api.get(f"/api/v1/namespaces/{ns}"))["metadata"].get("labels", {})
    assert "quota.karmada.io/enforced" not in labels

    await api.post(
        f"/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas",
        product.quota(ns, "team", {"requests.cpu": "12"}),
    )
    created = time.monotonic()

    async def labelled() -> bool:
        got = (await api.get(f"/api/v1/namespaces/{ns}"))["metadata"].get("labels", {})
        return got.get("quota.karmada.io/enforced") == "true"

    await eventually(labelled, 10, "the controller labels the quota's namespace")
    took = time.monotonic() - created
    print(f"namespace labelled {took:.3f}s after its first quota")
    assert took < 2.0
    labels = (await api.get(f"/api/v1/namespaces/{ns}"))["metadata"]["labels"]
    # a quota that only refuses: the queueing (mutating) webhook is not called here at all
    assert "quota.karmada.io/queueing" not in labels

    # the ten bindings created before are counted; the next one past the quota is refused
    # (until the controller's first status the webhook refuses with "status unknown")
    def refused_past_quota() -> bool:
        return used(testbed, ns, "team", "requests.cpu") == Quantity.parse("10")

    await eventually(refused_past_quota, 30, "the ten earlier bindings counted")
    with pytest.raises(KubeError, match=r"exceeded quota: team, requested: requests\.cpu=3"):
        await api.post(path, binding(ns, "late", cpu="3"))
    assert product.decisions(webhook, ns, "late") == 1  # once labelled, the count counts

    def enforced() -> bool:
        q = testbed.get("karmadaquota", "team", namespace=ns) or {}
        conditions = {c["type"]: c for c in q.get("status", {}).get("conditions", [])}
        return conditions.get("Enforced", {}).get("status") == "True"

    await eventually(enforced, 30, "the quota's Enforced condition")
