"""Kinds as an allow-list (docs/charging.md, "Which kinds are charged").

Every expected charge here is written from docs/charging.md: a kind that runs no pods costs its
own object (`count/<resource>.<group>` and the legacy name) and nothing else; a declared kind
costs R × one replica of the pod at its declared template path, as Kubernetes charges the pod.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from karmadaquota import pod_template
from karmadaquota.api import ResourceBinding
from karmadaquota.charge import charge
from karmadaquota.controller.index import Interner, observe
from karmadaquota.evaluate import evaluate
from karmadaquota.kinds import Kinds
from karmadaquota.kube.templates import TemplateStore
from karmadaquota.webhook.config import WebhookConfig
from karmadaquota.webhook.handlers import assemble
from karmadaquota.webhook.routes import build_app
from tests.conftest import as_strings, binding, binding_doc, view
from tests.core.test_pod_template import container
from tests.fake_api import FakeApiServer, quota_doc
from tests.polling import until
from tests.webhook.test_webhook_app import post, review

CLONESET = "apps.kruise.io/v1alpha1/CloneSet=clonesets:spec.replicas:spec.template"
CLONESETS = "/apis/apps.kruise.io/v1alpha1/namespaces/ns/clonesets"
# what a tenant's pods-and-compute quota tracks (the example: pods=1, requests.cpu=1)
RUNS = {"pods": "1", "requests.cpu": "1"}


@pytest.fixture
def kinds() -> Kinds:
    return Kinds.of([CLONESET])


async def started(
    api: FakeApiServer, kinds: Kinds, *quotas: dict[str, Any]
) -> AsyncIterator[TestClient[Any, Any]]:
    """A webhook over `api` charging with `kinds`, assembled as the program assembles it
    (`handlers.assemble`), its stores fed by their informers."""
    for q in quotas:
        api.add_quota(q)
    webhook = assemble(api, WebhookConfig(kinds=kinds))
    fed = asyncio.create_task(webhook.run())
    await until(webhook.synced, what="the webhook's caches synced")
    client = TestClient(TestServer(build_app(webhook)))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()
        fed.cancel()
        await webhook.close()


async def answer(client: TestClient[Any, Any], doc: dict[str, Any]) -> dict[str, Any]:
    status, body = await post(client, "/validate-resourcebinding", review(doc))
    assert status == 200
    response: dict[str, Any] = body["response"]
    return response


def _model(doc: dict[str, Any]) -> ResourceBinding:
    return ResourceBinding.model_validate(doc)


def unguarded(doc: dict[str, Any]) -> dict[str, Any]:
    doc["spec"]["memberEnforcement"] = "None"
    return doc


# ---------------------------------------------------------------------------------------------
# a kind whose pods nothing counts


def unknown_workload() -> dict[str, Any]:
    """A custom workload with a third-party interpreter: 5 replicas × 500m propagated, but
    Karmada's binding carries none."""
    return binding_doc(
        0,
        None,
        api_version="example.io/v1",
        kind="Workload",
        name="wl",
        namespace="ns",
        clusters={"member1": 0, "member2": 0},
    )


async def test_an_unknown_kind_is_refused_by_an_unguarded_quota_naming_every_way_out(
    kinds: Kinds,
) -> None:
    api = FakeApiServer()
    async for client in started(api, kinds, unguarded(quota_doc(hard=RUNS))):
        response = await answer(client, unknown_workload())
        assert not response["allowed"]
        assert response["status"]["code"] == 403
        message = response["status"]["message"]
        assert message.startswith("failed quota: team-a: cannot charge spec.resource: ")
        assert "Workload.example.io" in message
        # the ways out: declare the kind (its pods, or that it runs none), or guard the members
        assert "--workload-kind" in message and "workloadKinds" in message
        assert "--podless-kind" in message and "podlessKinds" in message
        assert "set memberEnforcement: ResourceQuota, the default" in message
        assert "pods,requests.cpu" in message  # what the quota tracks


async def test_an_unknown_kind_is_admitted_where_the_members_enforce_the_quota_by_default(
    kinds: Kinds,
) -> None:
    """The same quota refuses it only while admission alone enforces it (memberEnforcement
    None); by default the members' guards bound what it runs."""
    for opted_out, allowed in ((True, False), (False, True)):
        api = FakeApiServer()
        doc = quota_doc(hard=RUNS)
        async for client in started(api, kinds, unguarded(doc) if opted_out else doc):
            assert (await answer(client, unknown_workload()))["allowed"] is allowed


def test_an_undeclared_kind_is_refused_only_by_quotas_tracking_what_runs() -> None:
    wl = charge(binding(0, None, api_version="example.io/v1", kind="Workload"))
    objects = {"count/workloads.example.io": "2", "services": "1"}
    d = evaluate([view("objects", objects, dict.fromkeys(objects, "0"))], wl)
    assert d.allowed
    assert as_strings(d.charges["objects"]) == {"count/workloads.example.io": "1"}
    refused = evaluate(
        [view("objects", objects), view("team", RUNS, member_enforcement="None")], wl
    )
    assert not refused.allowed and refused.message.startswith("failed quota: team: ")
    assert evaluate([view("objects", objects), view("team", RUNS)], wl).allowed  # guarded


def test_a_replication_controller_is_charged_its_templates_replicas_in_every_cluster() -> None:
    """Karmada's binding of a ReplicationController carries no replicas: every target cluster
    runs the template's `spec.replicas` (docs/charging.md): 3 × 500m in each of 2 clusters."""
    rc = {
        "apiVersion": "v1",
        "kind": "ReplicationController",
        "metadata": {"name": "rc", "namespace": "ns"},
        "spec": {
            "replicas": 3,
            "template": {"spec": {"containers": [container("app", {"cpu": "500m"})]}},
        },
    }
    pod = pod_template.of_template(rc)
    assert pod is not None and pod.replicas == 3
    b = binding(
        0, None, api_version="v1", kind="ReplicationController", clusters={"m1": 0, "m2": 0}
    )
    c = charge(b, pod)
    want = {
        "pods": "6",
        "cpu": "3",
        "count/replicationcontrollers": "1",
        "replicationcontrollers": "1",
    }
    assert {n: as_strings(c.total).get(n) for n in want} == want
    assert {n: as_strings(q)["pods"] for n, q in c.per_cluster.items()} == {"m1": "3", "m2": "3"}
    assert not c.uncounted


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        ("multicluster.x-k8s.io/v1alpha1", "ServiceExport"),
        ("multicluster.x-k8s.io/v1alpha1", "ServiceImport"),
        ("networking.karmada.io/v1alpha1", "MultiClusterService"),
    ],
)
def test_multi_cluster_services_run_no_pods(api_version: str, kind: str) -> None:
    """Issue 42: a ServiceExport was refused as a kind whose pods nothing counts."""
    c = charge(binding(3, {"cpu": "1"}, api_version=api_version, kind=kind, clusters={"m1": 3}))
    assert not c.uncounted
    assert "pods" not in c.total and "requests.cpu" not in c.total


def test_a_platform_team_declares_a_kind_that_runs_no_pods() -> None:
    kinds = Kinds.of([], ["example.io/v1/Dashboard"])
    c = charge(binding(2, {"cpu": "1"}, api_version="example.io/v1", kind="Dashboard"), None, kinds)
    assert not c.uncounted and "pods" not in c.total
    assert charge(binding(2, {"cpu": "1"}, api_version="example.io/v1", kind="Dashboard")).uncounted


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("Dashboard", "want APIVERSION/KIND"),
        ("apps/v1/Deployment", "Deployment.apps runs pods"),
        ("apps/v1/DaemonSet", "DaemonSet.apps runs pods"),
        ("v1/ConfigMap", "ConfigMap is known already"),
    ],
)
def test_a_podless_kind_that_runs_pods_or_is_unreadable_is_refused(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Kinds.of([], [text])


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        ("apps.kruise.io/v1alpha1", "CloneSet"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
        ("example.io/v1", "ConfigMap"),
    ],
)
def test_kinds_off_the_allow_list_are_named_uncounted(api_version: str, kind: str) -> None:
    """A kind is known by group and kind: a custom `ConfigMap` of another group is not the
    core one, and a member HorizontalPodAutoscaler scales its workload past any charge."""
    (reason,) = charge(binding(0, None, api_version=api_version, kind=kind)).uncounted
    assert reason.startswith("spec.resource: ") and "--workload-kind" in reason


# ---------------------------------------------------------------------------------------------
# a declared kind


def cloneset(cpu: str, replicas: int = 3) -> dict[str, Any]:
    """An OpenKruise CloneSet: its pod at spec.template.spec, a sidecar beside the app."""
    return {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {
                    "containers": [container("app", {"cpu": cpu})],
                    "initContainers": [container("proxy", {"cpu": "200m"}, restartPolicy="Always")],
                }
            },
        },
    }


def cloneset_binding(template: dict[str, Any], replicas: int, clusters: dict[str, int]) -> Any:
    """Its binding as Karmada's third-party interpreter makes it: replicaRequirements are the
    containers' 300m (Karmada takes the maximum of the sidecar and the app, not their sum)."""
    doc = binding_doc(
        replicas,
        {"cpu": "300m"},
        api_version="apps.kruise.io/v1alpha1",
        kind="CloneSet",
        name="web",
        namespace="ns",
        clusters=clusters,
    )
    doc["spec"]["resource"]["resourceVersion"] = template["metadata"]["resourceVersion"]
    return doc


async def test_a_declared_kind_is_charged_from_its_declared_paths_by_both_programs(
    kinds: Kinds,
) -> None:
    api = FakeApiServer()
    template = api.create(CLONESETS, cloneset("300m"))
    doc = cloneset_binding(template, 3, {"member1": 2, "member2": 1})
    # docs/charging.md: R × one replica as Kubernetes charges its pod = 3 × (300m + 200m)
    async for client in started(api, kinds, quota_doc(hard={"pods": "3", "requests.cpu": "1"})):
        response = await answer(client, doc)
        assert not response["allowed"]
        assert response["status"]["message"] == (
            "exceeded quota: team-a, requested: requests.cpu=1500m, used: requests.cpu=0, "
            "limited: requests.cpu=1"
        )
    store = TemplateStore(kinds=kinds)
    store.put(("apps.kruise.io", "CloneSet", "ns", "web"), template)
    entry = observe(doc, Interner(), store).entry
    assert entry is not None
    counted = dict(zip(entry.usage.names, entry.usage.total, strict=True))
    assert counted["requests.cpu"] == 1500 * 1_000_000  # nano-units
    assert counted["pods"] == 3 * 1_000_000_000


async def test_a_declared_kind_s_template_whose_pod_grows_past_the_quota_is_refused(
    kinds: Kinds,
) -> None:
    """docs/charging.md: Karmada renders the template as it is on its next sync of the binding,
    so a pod that grows is charged when the template is written, declared kind or not."""
    api = FakeApiServer()
    template = api.create(CLONESETS, cloneset("300m", replicas=2))
    doc = cloneset_binding(template, 2, {"member1": 2})
    async for client in started(api, kinds, quota_doc(hard={"pods": "4", "requests.cpu": "2"})):
        assert (await answer(client, doc))["allowed"]  # 2 × (300m + 200m)
        api.create("/apis/work.karmada.io/v1alpha2/namespaces/ns/resourcebindings", doc)
        grown = copy.deepcopy(template)
        grown["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "900m"
        resource = {"group": "apps.kruise.io", "version": "v1alpha1", "resource": "clonesets"}
        _, body = await post(
            client, "/validate-template", review(grown, "UPDATE", template, resource=resource)
        )
        assert not body["response"]["allowed"]
        # 2 × (900m + 200m) = 2200m, of which 1000m is charged already
        assert body["response"]["status"]["message"] == (
            "exceeded quota: team-a, requested: requests.cpu=1200m, used: requests.cpu=1, "
            "limited: requests.cpu=2"
        )


def test_a_declared_kind_s_replicas_path_is_what_karmada_renders_while_its_binding_has_none(
    kinds: Kinds,
) -> None:
    """docs/charging.md: a binding with no replicas runs its template's own in every member."""
    store = TemplateStore(kinds=kinds)
    template = {
        **cloneset("100m", replicas=4),
        "metadata": {"name": "web", "namespace": "ns", "resourceVersion": "7"},
    }
    store.put(("apps.kruise.io", "CloneSet", "ns", "web"), template)
    doc = cloneset_binding(template, 0, {"member1": 0, "member2": 0})
    bound = _model(doc)
    pod = store.resolve(bound.spec.resource, "ns")
    assert not isinstance(pod, tuple)
    c = charge(bound, pod, kinds)
    assert c.uncounted == ()
    # 4 in each of 2 members, each 100m + 200m
    assert as_strings(c.total)["pods"] == "8"
    assert as_strings(c.total)["requests.cpu"] == "2400m"


# ---------------------------------------------------------------------------------------------
# dependency bindings (propagateDeps)


def attached(kind: str, owner_replicas: int, preserve: bool | None = None) -> dict[str, Any]:
    """The binding Karmada's dependencies distributor attaches to a dependency of a
    Deployment binding (`buildAttachedBinding`): the dependency as its resource, the owner's
    binding (its clusters and their replicas) in `requiredBy`, a `depended-by` label, no
    replicas, the owner's preserveResourcesOnDeletion."""
    doc = binding_doc(
        0,
        None,
        api_version="v1",
        kind=kind,
        name="app-config",
        namespace="ns",
        required_by={"member1": owner_replicas},
        preserve=preserve,
    )
    doc["spec"]["requiredBy"][0]["name"] = "web-deployment"
    doc["metadata"]["labels"] = {
        "resourcebinding.karmada.io/depended-by-5dbb6f4d8b": "4f2c9a1e-owner-permanent-id"
    }
    return doc


# a quota with room for the Deployment, tracking compute, pods and the dependencies' objects
ROOM = {
    "pods": "20",
    "requests.cpu": "10",
    "configmaps": "5",
    "count/secrets": "5",
    "count/serviceaccounts": "5",
}


@pytest.mark.parametrize(
    ("kind", "objects"),
    [
        ("ConfigMap", {"count/configmaps": "1", "configmaps": "1"}),
        ("Secret", {"count/secrets": "1", "secrets": "1"}),
        ("ServiceAccount", {"count/serviceaccounts": "1"}),
    ],
)
@pytest.mark.parametrize("preserve", [None, True])
def test_a_dependency_binding_is_charged_its_own_object_never_its_owner_s_replicas(
    kind: str, objects: dict[str, str], preserve: bool | None
) -> None:
    c = charge(_model(attached(kind, 10, preserve)))
    assert as_strings(c.total) == objects
    assert {m: as_strings(u) for m, u in c.per_cluster.items()} == {"member1": objects}
    assert c.missing_requests == frozenset() and c.uncounted == ()
    d = evaluate([view("team", ROOM)], c)
    assert d.allowed, d.message
    tracked = {n: v for n, v in objects.items() if n in ROOM}
    assert as_strings(d.charges["team"]) == tracked


def test_a_kind_that_runs_no_pods_is_never_charged_replicas_whatever_its_binding_says() -> None:
    """Replicas and requests on a ConfigMap's binding (an interpreter's, a hand-made one) run
    nothing: Karmada renders a ConfigMap."""
    c = charge(
        binding(
            5,
            {"cpu": "1"},
            api_version="v1",
            kind="ConfigMap",
            clusters={"member1": 5},
            evictions={"member2": 3},
        )
    )
    assert as_strings(c.total) == {"count/configmaps": "1", "configmaps": "1"}
    assert set(c.per_cluster) == {"member1", "member2"}
    assert not c.traits.has_replicas


async def test_the_webhook_admits_the_configmap_a_ten_replica_deployment_reads() -> None:
    """The issue's false refusal: 'failed quota: q: must specify requests.cpu'."""
    api = FakeApiServer()
    async for client in started(api, Kinds(), quota_doc(hard=ROOM)):
        response = await answer(client, attached("ConfigMap", 10))
        assert response["allowed"], response.get("status")


# ---------------------------------------------------------------------------------------------
# declaring


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("apps/v1/DaemonSet=daemonsets:spec.replicas:spec.template", "cannot count its replicas"),
        ("batch/v1/CronJob=cronjobs:spec.x:spec.jobTemplate.spec.template", "cannot count"),
        ("apps/v1/Deployment=deployments:spec.replicas:spec.template", "known already"),
        ("v1/ConfigMap=configmaps:spec.replicas:spec.template", "known already"),
        ("CloneSet=clonesets:spec.replicas:spec.template", "want APIVERSION/KIND"),
        ("apps.kruise.io/v1alpha1/CloneSet=clonesets:spec.replicas", "want APIVERSION/KIND"),
        ("apps.kruise.io/v1alpha1/CloneSet=CloneSets:spec.replicas:spec.template", "resource"),
        ("apps.kruise.io/v1alpha1/CloneSet=clonesets:spec..replicas:spec.template", "path"),
        (f"{CLONESET},{CLONESET}", "declared twice"),
    ],
)
def test_a_declaration_that_cannot_be_charged_is_refused_at_start(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Kinds.of([text])


def test_both_programs_take_the_same_declarations() -> None:
    from karmadaquota import cli
    from karmadaquota.controller.main import config_from

    webhook = cli._parser().parse_args(
        ["webhook", "--tls-cert-file=x", "--tls-private-key-file=y", f"--workload-kind={CLONESET}"]
    )
    controller = cli._parser().parse_args(["controller", f"--workload-kind={CLONESET}"])
    assert cli.webhook_config(webhook).kinds == config_from(controller, {}).workload_kinds
    assert cli.webhook_config(webhook).kinds.declared.keys() == {("apps.kruise.io", "CloneSet")}
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["controller", "--workload-kind=apps/v1/DaemonSet=x:a:b"])


def test_a_statefulsets_claim_templates_are_charged_per_replica() -> None:
    """Issue 42: a StatefulSet of 3 replicas with one claim template made 3 claims in the
    member against persistentvolumeclaims=1, charged 0. Written from docs/charging.md:
    per replica, per template, one claim and its storage, also under its class."""
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "ns"},
        "spec": {
            "replicas": 3,
            "template": {"spec": {"containers": [container("db", {"cpu": "100m"})]}},
            "volumeClaimTemplates": [
                {"spec": {"resources": {"requests": {"storage": "1Gi"}}}},
                {
                    "spec": {
                        "storageClassName": "fast",
                        "resources": {"requests": {"storage": "10Gi"}},
                    }
                },
            ],
        },
    }
    pod = pod_template.of_template(sts)
    b = binding(
        3, {"cpu": "100m"}, api_version="apps/v1", kind="StatefulSet", clusters={"m1": 2, "m2": 1}
    )
    total = as_strings(charge(b, pod).total)
    fast = "fast.storageclass.storage.k8s.io/"
    want = {
        "persistentvolumeclaims": "6",
        "count/persistentvolumeclaims": "6",
        "requests.storage": "33Gi",
        fast + "persistentvolumeclaims": "3",
        fast + "requests.storage": "30Gi",
        "pods": "3",
    }
    assert {n: total.get(n) for n in want} == want
    m2 = as_strings(charge(b, pod).per_cluster["m2"])
    assert (m2["persistentvolumeclaims"], m2["requests.storage"]) == ("2", "11Gi")
    evaluated = evaluate([view("claims", {"persistentvolumeclaims": "1"})], charge(b, pod))
    assert not evaluated.allowed and "persistentvolumeclaims" in evaluated.message
