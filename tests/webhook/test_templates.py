"""The templates' pods a binding is charged with: the store, the webhook's reads, its gate."""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from karmadaquota.api import BindingResource
from karmadaquota.kube.templates import MISSING, TemplateStore
from karmadaquota.pod_template import PodCharge
from karmadaquota.webhook.batcher import Batcher
from karmadaquota.webhook.handlers import Webhook
from karmadaquota.webhook.metrics import WebhookMetrics
from karmadaquota.webhook.routes import build_app
from tests import conftest
from tests.conftest import binding_doc
from tests.core.test_pod_template import container, deployment
from tests.fake_api import FakeApiServer, Replica, quota_doc
from tests.webhook.test_webhook_app import Hanging, post, review

DEPLOYMENTS = "/apis/apps/v1/namespaces/ns/deployments"
KEY = ("apps", "Deployment", "ns", "web")
TEMPLATES = {"group": "apps", "version": "v1", "resource": "deployments"}
SIDECAR = {
    "containers": [container("app", {"cpu": "400m"})],
    "initContainers": [container("proxy", {"cpu": "400m"}, restartPolicy="Always")],
}


def ref(rv: str) -> BindingResource:
    return BindingResource(apiVersion="apps/v1", kind="Deployment", name="web", resourceVersion=rv)


def cpu(pod: Any) -> str:
    assert isinstance(pod, PodCharge)
    return str(pod.requests["cpu"])


def test_the_store_answers_the_version_a_binding_names_or_a_newer_one() -> None:
    store = TemplateStore()
    one = deployment({"containers": [container("app", {"cpu": "1"})]})
    store.put(KEY, {**one, "metadata": {**one["metadata"], "resourceVersion": "5"}})
    two = deployment({"containers": [container("app", {"cpu": "2"})]})
    store.put(KEY, {**two, "metadata": {**two["metadata"], "resourceVersion": "8"}})
    # the most of the version the binding names and every newer one: Karmada renders the
    # newest on its next sync of the binding
    assert cpu(store.lookup(KEY, "5")) == "2"
    assert cpu(store.lookup(KEY, "8")) == "2"
    three = deployment({"containers": [container("app", {"cpu": "500m"})]})
    store.put(KEY, {**three, "metadata": {**three["metadata"], "resourceVersion": "9"}})
    assert cpu(store.lookup(KEY, "8")) == "2"  # shrunk, but the binding still runs 2 until
    assert cpu(store.lookup(KEY, "9")) == "500m"  # its update names the shrunk version
    assert store.lookup(KEY, "10") is MISSING  # not arrived yet
    assert store.resolve(ref("10"), "ns") == KEY  # the controller waits for it
    assert store.resolve(ref(""), "ns") is None  # a binding made by hand: its own fields
    store.drop(KEY)
    # deleted: the binding that lingers is still charged with what it may run, and one that
    # waited for a version that never came with its own fields
    assert cpu(store.resolve(ref("9"), "ns")) == "500m"
    assert store.resolve(ref("10"), "ns") is None


async def test_fetch_reads_a_template_the_store_does_not_hold_once() -> None:
    api = FakeApiServer()
    stored = api.create(DEPLOYMENTS, deployment(SIDECAR))
    store = TemplateStore(api)
    rv = stored["metadata"]["resourceVersion"]
    assert cpu(await store.fetch(ref(rv), "ns")) == "800m"
    assert cpu(await store.fetch(ref(rv), "ns")) == "800m"
    assert store.reads == 1
    missing = BindingResource(
        apiVersion="apps/v1", kind="Deployment", name="gone", resourceVersion="1"
    )
    assert await store.fetch(missing, "ns") is None
    odd = BindingResource(apiVersion="example.io/v1", kind="Thing", name="x", resourceVersion="1")
    assert await store.fetch(odd, "ns") is None and store.reads == 2


@pytest.fixture
async def gated() -> AsyncIterator[tuple[TestClient[Any, Any], FakeApiServer, TemplateStore]]:
    api = FakeApiServer()
    # admission alone (memberEnforcement None): the gate is what holds the quota here
    store = Replica(
        quota_doc(hard={"requests.cpu": "1"}, namespace="ns", member_enforcement="None"), api=api
    )
    templates = TemplateStore(api)
    webhook = Webhook(store.quota_store(), Batcher(store), WebhookMetrics(), templates=templates)
    client = TestClient(TestServer(build_app(webhook)))
    await client.start_server()
    yield client, api, templates
    await client.close()


@pytest.fixture
def gate(
    gated: tuple[TestClient[Any, Any], FakeApiServer, TemplateStore],
) -> tuple[TestClient[Any, Any], FakeApiServer]:
    return gated[0], gated[1]


def binding_of(template: dict[str, Any], cpu: str, name: str = "web") -> dict[str, Any]:
    doc = binding_doc(1, {"cpu": cpu}, name=name, namespace="ns", clusters={"m1": 1})
    doc["spec"]["resource"]["resourceVersion"] = template["metadata"]["resourceVersion"]
    return doc


async def propagated(client: TestClient[Any, Any], api: FakeApiServer) -> dict[str, Any]:
    """A 400m Deployment whose binding was admitted and stored, as Karmada's detector makes it."""
    old = api.create(DEPLOYMENTS, deployment({"containers": [container("app", {"cpu": "400m"})]}))
    bound = binding_of(old, "400m")
    _, body = await post(client, "/validate-resourcebinding", review(bound))
    assert body["response"]["allowed"]
    api.create("/apis/work.karmada.io/v1alpha2/namespaces/ns/resourcebindings", bound)
    return old


def with_cpu(template: dict[str, Any], cpu: str) -> dict[str, Any]:
    """The template with its container's cpu request changed."""
    out = copy.deepcopy(template)
    out["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    return out


async def test_a_sidecar_is_charged_so_the_next_workload_is_refused(gate: Any) -> None:
    client, api = gate
    web = api.create(DEPLOYMENTS, deployment(SIDECAR))
    # Karmada's replicaRequirements say 400m (the maximum of the two); the pod requests 800m
    _, body = await post(client, "/validate-resourcebinding", review(binding_of(web, "400m")))
    assert body["response"]["allowed"]
    small = api.create(
        DEPLOYMENTS, deployment({"containers": [container("a", {"cpu": "300m"})]}, "db")
    )
    _, body = await post(
        client, "/validate-resourcebinding", review(binding_of(small, "300m", "db"))
    )
    assert not body["response"]["allowed"]
    assert body["response"]["status"]["message"] == (
        "exceeded quota: team-a, requested: requests.cpu=300m, used: requests.cpu=800m, "
        "limited: requests.cpu=1"
    )


async def test_a_template_whose_pod_grows_past_the_quota_is_refused(gate: Any) -> None:
    client, api = gate
    old = await propagated(client, api)
    grown = with_cpu(old, "2")
    _, body = await post(
        client, "/validate-template", review(grown, "UPDATE", old, resource=TEMPLATES)
    )
    assert not body["response"]["allowed"]
    assert body["response"]["status"]["message"] == (
        "exceeded quota: team-a, requested: requests.cpu=1600m, used: requests.cpu=400m, "
        "limited: requests.cpu=1"
    )
    fits = with_cpu(old, "1")
    _, body = await post(
        client, "/validate-template", review(fits, "UPDATE", old, resource=TEMPLATES)
    )
    assert body["response"]["allowed"]
    shrunk = with_cpu(old, "100m")
    _, body = await post(
        client, "/validate-template", review(shrunk, "UPDATE", grown, resource=TEMPLATES)
    )
    assert body["response"]["allowed"]


async def test_a_binding_read_that_hangs_is_refused_within_the_review_s_budget(
    gated: Any,
) -> None:
    """The API server gives the review 1 s (`?timeout=1s`): a binding read that does not answer
    is refused, fail closed, before that, not after the client's own 10 s deadline."""
    client, api, templates = gated
    old = await propagated(client, api)

    templates.client = Hanging()
    started = time.monotonic()
    _, body = await post(
        client,
        "/validate-template?timeout=1s",
        review(with_cpu(old, "500m"), "UPDATE", old, resource=TEMPLATES),
    )
    took = time.monotonic() - started
    assert not body["response"]["allowed"]
    assert body["response"]["status"]["message"].startswith(
        "karmadaquota webhook: the binding of web cannot be read: no answer within"
    ), body["response"]["status"]["message"]
    assert took < 1.0, took


async def test_a_template_read_that_hangs_refuses_the_binding_within_its_budget(
    gated: Any,
) -> None:
    client, api, templates = gated
    web = api.create(DEPLOYMENTS, deployment({"containers": [container("app", {"cpu": "400m"})]}))

    templates.client = Hanging()
    started = time.monotonic()
    _, body = await post(
        client, "/validate-resourcebinding?timeout=1s", review(binding_of(web, "400m"))
    )
    assert time.monotonic() - started < 1.0
    assert not body["response"]["allowed"]
    message = body["response"]["status"]["message"]
    assert "cannot be read to charge its pods: no answer in time; try again" in message, message


async def test_a_template_without_a_binding_may_grow(gate: Any) -> None:
    client, api = gate
    old = api.create(DEPLOYMENTS, deployment({"containers": [container("app", {"cpu": "400m"})]}))
    grown = with_cpu(old, "5")
    _, body = await post(
        client, "/validate-template", review(grown, "UPDATE", old, resource=TEMPLATES)
    )
    assert body["response"]["allowed"]


def test_the_controller_counts_a_binding_from_its_fields_at_generation_0_until_its_template() -> (
    None
):
    from karmadaquota.controller.index import Interner, observe

    store = TemplateStore()
    template = deployment(SIDECAR)  # resourceVersion 7
    doc = binding_of(template, "400m")
    waiting = observe(doc, Interner(), store)
    assert waiting.waiting and waiting.template == KEY and waiting.entry is not None
    assert waiting.entry.generation == 0  # its pending charge is not released meanwhile
    store.put(KEY, template)
    counted = observe(doc, Interner(), store)
    assert not counted.waiting and counted.template == KEY and counted.entry is not None
    assert counted.entry.generation == doc["metadata"]["generation"]
    names = dict(zip(counted.entry.usage.names, counted.entry.usage.total, strict=True))
    assert names["requests.cpu"] == 800_000_000  # nanocores: the sidecar counted


def test_status_writes_do_not_push_out_the_pod_a_lagging_binding_names() -> None:
    store = TemplateStore()
    big = deployment({"containers": [container("app", {"cpu": "2", "memory": "1Gi"})]})
    store.put(KEY, {**big, "metadata": {**big["metadata"], "resourceVersion": "5"}})
    small = deployment({"containers": [container("app", {"cpu": "1", "memory": "2Gi"})]})
    for rv in range(6, 20):  # the shrink, then many status writes of the same pod
        store.put(KEY, {**small, "metadata": {**small["metadata"], "resourceVersion": str(rv)}})
    most = store.lookup(KEY, "5")
    assert isinstance(most, PodCharge)
    assert {n: str(q) for n, q in most.requests.items()} == {"cpu": "2", "memory": "2Gi"}
    assert cpu(store.lookup(KEY, "19")) == "1"


async def test_a_template_that_takes_a_deleted_one_s_name_pays_its_growth(gated: Any) -> None:
    """Deleted and created again bigger while its binding lingers (Karmada's garbage collector
    has not removed it yet): Karmada would render the new pod through the old binding."""
    client, api, templates = gated
    await propagated(client, api)
    fresh = deployment({"containers": [container("app", {"cpu": "500m"})]}, "db")
    _, body = await post(client, "/validate-template", review(fresh, resource=TEMPLATES))
    assert body["response"]["allowed"]  # a name the store knows nothing of: no read
    assert "GET resourcebindings" not in api.calls
    templates.drop(KEY)  # the old template's deletion seen
    bigger = deployment({"containers": [container("app", {"cpu": "2"})]})
    bigger["metadata"]["uid"] = "uid-new"
    _, body = await post(client, "/validate-template", review(bigger, resource=TEMPLATES))
    assert not body["response"]["allowed"]
    assert body["response"]["status"]["message"].startswith(
        "exceeded quota: team-a, requested: requests.cpu=1600m, used: requests.cpu=400m"
    )


def test_template_bindings_say_whom_a_template_change_reaches() -> None:
    from karmadaquota.controller.template_bindings import TemplateBindings

    tb = TemplateBindings()
    waiting_obj = {"metadata": {"name": "b"}}
    tb.track("ns", "uid-a", "a", KEY, None)
    tb.track("ns", "uid-b", "b", KEY, waiting_obj)
    tb.track("ns", "uid-c", "c", None, None)  # no template: never reached
    same = tb.again(KEY, pod_changed=False)
    assert same.now == [waiting_obj] and same.read == []  # status writes touch no one else
    changed = tb.again(KEY, pod_changed=True)
    assert changed.now == [waiting_obj] and changed.read == [("ns", "uid-a", "a")]
    tb.track("ns", "uid-b", "b", KEY, None)  # its version arrived
    tb.forget("ns", "uid-a")  # deleted
    assert tb.again(KEY, pod_changed=True).read == [("ns", "uid-b", "b")]
    tb.forget("ns", "uid-b")
    assert tb.again(KEY, pod_changed=True) == type(changed)([], []) and len(tb) == 0


async def test_the_api_server_s_retry_of_an_admitted_growth_is_not_charged_twice(
    gate: Any,
) -> None:
    """A PATCH that loses its write to a concurrent one (Karmada writes templates' status) is
    retried by the API server, admission included: the same growth is admitted again, once."""
    client, api = gate
    old = await propagated(client, api)
    grown = with_cpu(old, "700m")
    for _ in range(2):  # the first attempt, then the API server's retry
        _, body = await post(
            client, "/validate-template", review(grown, "UPDATE", old, resource=TEMPLATES)
        )
        assert body["response"]["allowed"]
    # 400m used + 300m reserved once: 300m is left, not 0
    other = api.create(
        DEPLOYMENTS, deployment({"containers": [container("a", {"cpu": "300m"})]}, "db")
    )
    _, body = await post(
        client, "/validate-resourcebinding", review(binding_of(other, "300m", "db"))
    )
    assert body["response"]["allowed"], body["response"]["status"]["message"]


def scale_review(name: str, new: int, old: int) -> dict[str, Any]:
    """An UPDATE of a Deployment's scale subresource (a Scale omits replicas when zero)."""

    def scale(replicas: int) -> dict[str, Any]:
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"replicas": replicas} if replicas else {},
        }

    doc = review(scale(new), "UPDATE", scale(old), resource=TEMPLATES)
    doc["request"]["subResource"] = "scale"
    return doc


async def test_a_template_scaled_up_while_its_binding_has_no_replicas_is_charged_per_member(
    gate: Any,
) -> None:
    """Karmada renders a binding's replicas into each member only when the binding has some;
    at 0 it renders the template's own, in every member. A scale-up then is charged so, at the
    template (scale subresource or the template itself), before any binding update."""
    client, api = gate  # requests.cpu: 1
    zero, binding = await bound(client, api, {"m1": 0, "m2": 0})
    _, body = await post(client, "/validate-template", scale_review("web", 6, 0))
    assert not body["response"]["allowed"]
    assert body["response"]["status"]["message"].startswith(
        "exceeded quota: team-a, requested: requests.cpu=1200m,"  # 6 in each of 2 members
    )
    six = copy.deepcopy(zero)
    six["spec"]["replicas"] = 6
    _, body = await post(
        client, "/validate-template", review(six, "UPDATE", zero, resource=TEMPLATES)
    )
    assert not body["response"]["allowed"]
    _, body = await post(client, "/validate-template", scale_review("web", 5, 0))
    assert body["response"]["allowed"]  # 1000m: reserved for the binding's next generation
    _, body = await post(client, "/validate-template", scale_review("web", 1, 0))
    assert not body["response"]["allowed"]  # the 1000m just reserved holds
    # the scale is written; Karmada's detector then updates the binding: already paid for at
    # the template (its old side is what Karmada renders while it has no replicas: 5 in each
    # member), so it is admitted without a second charge
    scaled = api.update(f"{DEPLOYMENTS}/web", lambda d: d["spec"].update(replicas=5))
    grown = copy.deepcopy(binding)
    grown["metadata"]["generation"] = 2
    grown["spec"]["replicas"] = 5
    grown["spec"]["resource"]["resourceVersion"] = scaled["metadata"]["resourceVersion"]
    _, body = await post(client, "/validate-resourcebinding", review(grown, "UPDATE", binding))
    assert body["response"]["allowed"], body["response"]


async def test_a_scale_up_of_a_template_whose_binding_has_replicas_is_the_binding_s_to_charge(
    gate: Any,
) -> None:
    """Karmada revises every member's replicas from the binding's: the scale-up reaches the
    members only through the binding's update, which the binding route charges."""
    client, api = gate
    await propagated(client, api)  # 1 replica of 400m
    _, body = await post(client, "/validate-template", scale_review("web", 20, 1))
    assert body["response"]["allowed"]
    _, body = await post(client, "/validate-template", scale_review("web", 0, 1))
    assert body["response"]["allowed"]  # a scale-down is never charged


def test_the_controller_counts_a_binding_without_replicas_as_karmada_renders_its_template() -> None:
    """A binding with no replicas of its own: Karmada renders the template's replicas into
    each member. A scale of the template is a change the controller recounts on."""
    from karmadaquota.controller.index import Interner, observe

    store = TemplateStore()
    changes: list[bool] = []
    store.on_change(lambda key, pod_changed: changes.append(pod_changed))
    zero = deployment({"containers": [container("app", {"cpu": "100m"})]})
    zero["spec"]["replicas"] = 0
    store.put(KEY, zero)  # resourceVersion 7
    doc = binding_doc(0, {"cpu": "100m"}, namespace="ns", clusters={"m1": 0, "m2": 0})
    doc["spec"]["resource"]["resourceVersion"] = "7"

    def cpu_counted() -> int:
        entry = observe(doc, Interner(), store).entry
        assert entry is not None
        names = dict(zip(entry.usage.names, entry.usage.total, strict=True))
        return names.get("requests.cpu", 0) // 1_000_000

    assert cpu_counted() == 0
    three = {**zero, "metadata": {**zero["metadata"], "resourceVersion": "9"}}
    three["spec"] = {**zero["spec"], "replicas": 3}
    store.put(KEY, three)
    assert changes[1:] == [True]  # after the first version: the scale
    assert cpu_counted() == 600  # 3 in each of 2 members, 100m each


async def bound(
    client: TestClient[Any, Any] | None,
    api: FakeApiServer,
    clusters: dict[str, int],
    **limits: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Deployment of 100m at Σ `clusters` replicas and its binding over `clusters`, admitted
    (by `client`'s webhook; None: not seen, as across a restart) and stored as Karmada's
    detector and scheduler make them; a binding of 0 replicas is on every cluster named."""
    app = container("app", {"cpu": "100m"})
    if limits:
        app["resources"]["limits"] = dict(limits)
    template = deployment({"containers": [app]})
    template["spec"]["replicas"] = sum(clusters.values())
    template = api.create(DEPLOYMENTS, template)
    doc = binding_doc(sum(clusters.values()), {"cpu": "100m"}, namespace="ns", clusters=clusters)
    doc["spec"]["resource"]["resourceVersion"] = template["metadata"]["resourceVersion"]
    if client is not None:
        _, body = await post(client, "/validate-resourcebinding", review(doc))
        assert body["response"]["allowed"], body["response"]
    api.create("/apis/work.karmada.io/v1alpha2/namespaces/ns/resourcebindings", doc)
    return template, doc


async def test_two_quick_scale_ups_are_charged_once(gate: Any) -> None:
    """0 -> 3 then 3 -> 5 before the watch delivers the first: the second is charged from the
    3 its old template asks for, so 1000m in all fits 1 cpu."""
    client, api = gate
    await bound(client, api, {"m1": 0, "m2": 0})
    _, body = await post(client, "/validate-template", scale_review("web", 3, 0))
    assert body["response"]["allowed"]  # 600m
    _, body = await post(client, "/validate-template", scale_review("web", 5, 3))
    assert body["response"]["allowed"], body["response"]  # 400m more
    _, body = await post(client, "/validate-template", scale_review("web", 6, 5))
    assert not body["response"]["allowed"]  # 1200m


async def test_a_scale_the_store_has_not_seen_reads_the_template(gated: Any) -> None:
    """The template store lags (a restart): the gate reads the template, so a quota on
    limits.cpu charges its limits instead of refusing a replica without one."""
    client, api, templates = gated
    api.create(
        "/apis/quota.karmada.io/v1alpha1/namespaces/ns/karmadaquotas",
        quota_doc(name="limits", hard={"limits.cpu": "10"}, namespace="ns"),
    )
    await bound(None, api, {"m1": 0, "m2": 0}, cpu="100m")
    reads = templates.reads
    _, body = await post(client, "/validate-template", scale_review("web", 1, 0))
    assert body["response"]["allowed"], body["response"]
    assert templates.reads == reads + 1


async def test_a_binding_scaled_to_zero_is_charged_with_its_template_s_replicas_now(
    gated: Any,
) -> None:
    """Its template scaled down to 0 and straight back up to 6 (the gate sees a binding with
    replicas: revised, nothing to charge); Karmada's detector then writes the binding's 0, and
    Karmada renders the template's 6 in every member until it writes 6: that update is charged
    with the replicas the template has now (read live: the watch may lag), and refused here."""
    client, api, templates = gated  # requests.cpu: 1
    _, six = await bound(client, api, {"m1": 3, "m2": 3})
    down = api.update(f"{DEPLOYMENTS}/web", lambda d: d["spec"].update(replicas=0))
    templates.put(KEY, down)  # the watch delivered the scale-down, not yet the scale-up
    api.update(f"{DEPLOYMENTS}/web", lambda d: d["spec"].update(replicas=6))
    zero = copy.deepcopy(six)
    zero["metadata"]["generation"] = 2
    zero["spec"]["replicas"] = 0
    zero["spec"]["clusters"] = [{"name": "m1", "replicas": 0}, {"name": "m2", "replicas": 0}]
    zero["spec"]["resource"]["resourceVersion"] = down["metadata"]["resourceVersion"]
    _, body = await post(client, "/validate-resourcebinding", review(zero, "UPDATE", six))
    assert not body["response"]["allowed"]  # 6 in each member: 1200m, 600m more than held
    assert body["response"]["status"]["message"] == (
        "exceeded quota: team-a, requested: requests.cpu=600m, used: requests.cpu=600m, "
        "limited: requests.cpu=1"
    )


async def test_the_retain_replicas_label_is_refused_unless_the_members_enforce(
    gate: Any,
) -> None:
    """With it, Karmada keeps each member's own replicas (a member HPA's): no charge counts
    them, so a quota that does not make the members enforce refuses it, at the template."""
    client, api = gate
    old = await propagated(client, api)
    labelled = copy.deepcopy(old)
    labelled["metadata"]["labels"] = {"resourcetemplate.karmada.io/retain-replicas": "true"}
    _, body = await post(
        client, "/validate-template", review(labelled, "UPDATE", old, resource=TEMPLATES)
    )
    assert not body["response"]["allowed"]
    message = body["response"]["status"]["message"]
    assert "cannot charge metadata.labels: resourcetemplate.karmada.io/retain-replicas" in message
    assert "memberEnforcement: ResourceQuota" in message


# a template edit that moves its pods to another priority class or QoS (issue 42)
HIGH = [("PriorityClass", "In", ["high"])]
BINDINGS_NS = "/apis/work.karmada.io/v1alpha2/namespaces/ns/resourcebindings"


def scoped_quota(name: str, hard: dict[str, str], used: dict[str, str], **scope: Any) -> Any:
    return conftest.quota_doc(
        name, hard, used, namespace="ns", uid=name, member_enforcement="None", **scope
    )


@pytest.fixture
async def classes(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[TestClient[Any, Any], FakeApiServer, Replica]]:
    """Quotas of class low (room), of class high (`request.param` pods, 1 used), of class mid
    (room) and of BestEffort pods (full), over a webhook with the template gate."""
    api = FakeApiServer()
    store = Replica(
        scoped_quota(
            "low",
            {"pods": "10", "requests.cpu": "10"},
            {"pods": "0", "requests.cpu": "0"},
            expressions=[("PriorityClass", "In", ["low"])],
        ),
        scoped_quota("high", {"pods": request.param}, {"pods": "1"}, expressions=HIGH),
        scoped_quota(
            "mid", {"pods": "5"}, {"pods": "0"}, expressions=[("PriorityClass", "In", ["mid"])]
        ),
        scoped_quota("best-effort", {"pods": "1"}, {"pods": "1"}, scopes=["BestEffort"]),
        api=api,
    )
    webhook = Webhook(
        store.quota_store(), Batcher(store), WebhookMetrics(), templates=TemplateStore(api)
    )
    client = TestClient(TestServer(build_app(webhook)))
    await client.start_server()
    yield client, api, store
    await client.close()


async def of_class(client: TestClient[Any, Any], api: FakeApiServer) -> dict[str, Any]:
    """A Deployment of class low, 400m, whose binding was admitted (in quota low) and stored."""
    old = deployment(
        {"priorityClassName": "low", "containers": [container("app", {"cpu": "400m"})]}
    )
    old = api.create(DEPLOYMENTS, old)
    bound = binding_doc(
        1, {"cpu": "400m"}, namespace="ns", priority_class="low", clusters={"m1": 1}
    )
    bound["spec"]["resource"]["resourceVersion"] = old["metadata"]["resourceVersion"]
    _, body = await post(client, "/validate-resourcebinding", review(bound))
    assert body["response"]["allowed"], body["response"]
    api.create(BINDINGS_NS, bound)
    return old


def of_priority(template: dict[str, Any], priority: str) -> dict[str, Any]:
    out = copy.deepcopy(template)
    out["spec"]["template"]["spec"]["priorityClassName"] = priority
    return out


def pending(store: Replica, name: str) -> list[tuple[str, int, dict[str, Any]]]:
    """The quota's pending charges as the API server holds them: (binding, generation, charge)."""
    return [
        (r.reservedBy.name, r.generation, dict(r.reserved))
        for r in store.stored("ns", name).status.reservations
    ]


@pytest.mark.parametrize("classes", ["1"], indirect=True)
async def test_a_move_to_a_full_priority_class_is_refused_in_its_quota_s_name(
    classes: Any,
) -> None:
    client, api, store = classes
    old = await of_class(client, api)
    high = of_priority(old, "high")
    _, body = await post(
        client, "/validate-template", review(high, "UPDATE", old, resource=TEMPLATES)
    )
    assert not body["response"]["allowed"]
    assert body["response"]["status"]["message"] == (
        "exceeded quota: high, requested: pods=1, used: pods=1, limited: pods=1"
    )
    assert pending(store, "high") == []
    assert pending(store, "low") == [("web-deployment", 1, {"pods": "1", "requests.cpu": "400m"})]


@pytest.mark.parametrize("classes", ["2"], indirect=True)
async def test_a_move_to_a_priority_class_with_room_is_charged_there_until_the_binding_moves(
    classes: Any,
) -> None:
    """Charged in full in quota high, as the binding's next generation; quota low keeps its
    charge (its pods run until the rollout ends: the binding's update says when); the
    binding's update that carries the move is then charged nothing more."""
    client, api, store = classes
    old = await of_class(client, api)
    high = of_priority(old, "high")
    _, body = await post(
        client, "/validate-template", review(high, "UPDATE", old, resource=TEMPLATES)
    )
    assert body["response"]["allowed"], body["response"]
    assert pending(store, "high") == [("web-deployment", 2, {"pods": "1"})]
    assert pending(store, "low") == [("web-deployment", 1, {"pods": "1", "requests.cpu": "400m"})]
    assert store.stored("ns", "low").status.used == {"pods": "0", "requests.cpu": "0"}
    # the edit is written; Karmada's detector then moves the binding to class high
    written = api.update(
        f"{DEPLOYMENTS}/web",
        lambda d: d["spec"]["template"]["spec"].update(priorityClassName="high"),
    )
    before = api.bindings[("ns", "web-deployment")]
    moved = copy.deepcopy(before)
    moved["spec"]["replicaRequirements"]["priorityClassName"] = "high"
    moved["spec"]["resource"]["resourceVersion"] = written["metadata"]["resourceVersion"]
    _, body = await post(client, "/validate-resourcebinding", review(moved, "UPDATE", before))
    assert body["response"]["allowed"], body["response"]
    assert pending(store, "high") == [("web-deployment", 2, {"pods": "1"})]  # not twice


@pytest.mark.parametrize("classes", ["1"], indirect=True)
async def test_a_template_edit_that_moves_no_pod_is_not_charged(classes: Any) -> None:
    client, api, store = classes
    old = await of_class(client, api)
    image = copy.deepcopy(old)
    image["spec"]["template"]["spec"]["containers"][0]["image"] = "app:2"
    reads = api.calls["GET resourcebindings"]
    _, body = await post(
        client, "/validate-template", review(image, "UPDATE", old, resource=TEMPLATES)
    )
    assert body["response"]["allowed"]
    assert api.calls["GET resourcebindings"] == reads  # not even priced
    assert pending(store, "high") == [] and pending(store, "best-effort") == []


@pytest.mark.parametrize("classes", ["1"], indirect=True)
async def test_a_template_that_drops_every_request_into_a_full_best_effort_quota_is_refused(
    classes: Any,
) -> None:
    client, api, _ = classes
    old = await of_class(client, api)
    bare = copy.deepcopy(old)
    bare["spec"]["template"]["spec"]["containers"][0]["resources"] = {}
    _, body = await post(
        client, "/validate-template", review(bare, "UPDATE", old, resource=TEMPLATES)
    )
    assert not body["response"]["allowed"]
    assert body["response"]["status"]["message"] == (
        "exceeded quota: best-effort, requested: pods=1, used: pods=1, limited: pods=1"
    )


@pytest.mark.parametrize("classes", ["2"], indirect=True)
async def test_a_second_move_that_costs_the_same_is_no_retry_of_the_first(classes: Any) -> None:
    """low -> high, then high -> mid before the watch delivers the first: the same totals
    against the same binding generation, but charged in another quota."""
    client, api, store = classes
    old = await of_class(client, api)
    high = of_priority(old, "high")
    _, body = await post(
        client, "/validate-template", review(high, "UPDATE", old, resource=TEMPLATES)
    )
    assert body["response"]["allowed"], body["response"]
    mid = of_priority(old, "mid")
    _, body = await post(
        client, "/validate-template", review(mid, "UPDATE", high, resource=TEMPLATES)
    )
    assert body["response"]["allowed"], body["response"]
    assert pending(store, "mid") == [("web-deployment", 2, {"pods": "1"})]


def test_the_controller_counts_a_binding_where_its_template_s_pods_moved() -> None:
    """Until the binding's update, its pods may be of either class: both quotas count it."""
    from karmadaquota import scopes
    from karmadaquota.controller.index import Interner, observe

    store = TemplateStore()
    low = deployment({"priorityClassName": "low", "containers": [container("a", {"cpu": "1"})]})
    store.put(KEY, low)  # resourceVersion 7
    high = of_priority(low, "high")
    store.put(KEY, {**high, "metadata": {**high["metadata"], "resourceVersion": "9"}})
    doc = binding_doc(1, {"cpu": "1"}, namespace="ns", priority_class="low", clusters={"m1": 1})
    doc["spec"]["resource"]["resourceVersion"] = "7"
    entry = observe(doc, Interner(), store).entry
    assert entry is not None
    for klass in ("low", "high"):
        exprs = (scopes.Expression("PriorityClass", "In", frozenset({klass})),)
        assert scopes.matches(exprs, entry.usage.traits)
    doc["spec"]["resource"]["resourceVersion"] = "9"  # the binding moved: low's pods are gone
    doc["spec"]["replicaRequirements"]["priorityClassName"] = "high"
    entry = observe(doc, Interner(), store).entry
    assert entry is not None
    low_only = (scopes.Expression("PriorityClass", "In", frozenset({"low"})),)
    assert not scopes.matches(low_only, entry.usage.traits)
