"""Least privilege, verb by verb, with the identities the manifests create.

The controller's and the webhook's ServiceAccounts and RBAC (controller/karmada/,
webhook/karmada/{serviceaccount,rbac}.yaml) are applied to the bed's karmada-apiserver. Every call
each program makes (docs/security.md lists them with their call sites) must succeed with a token
of its ServiceAccount from the TokenRequest API; calls neither needs must be forbidden.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from e2e.testbed import TestBed, product
from e2e.testbed.storm import binding
from e2e.testbed.workloads import deployment
from karmadaquota.controller.guard_keeper import FINALIZER
from karmadaquota.kube.client import MERGE_PATCH, KubeClient, KubeError

pytestmark = pytest.mark.e2e

REPO = product.REPO
CONTROLLER_SA = ("karmada-system", "karmadaquota-controller")
WEBHOOK_SA = ("karmada-system", "karmadaquota-webhook")
WEBHOOK_FILES = [REPO / "webhook" / "karmada" / f for f in ("serviceaccount.yaml", "rbac.yaml")]
LEASES = "/apis/coordination.k8s.io/v1/namespaces/karmada-system/leases"
RB_ALL = "/apis/work.karmada.io/v1alpha2/resourcebindings"
QUOTAS_ALL = "/apis/quota.karmada.io/v1alpha1/karmadaquotas"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CKQ_ALL = "/apis/quota.karmada.io/v1alpha1/clusterkarmadaquotas"
VIEWS_ALL = "/apis/quota.karmada.io/v1alpha1/appliedclusterkarmadaquotas"
CLUSTERS = "/apis/cluster.karmada.io/v1alpha1/clusters"


@pytest.fixture(scope="module")
def manifests(testbed: TestBed) -> Iterator[None]:
    product.install_crd(testbed)
    lease = ("lease", "-n", "karmada-system", "karmadaquota-controller")
    testbed.kubectl("delete", *lease, "--ignore-not-found")  # the test creates it afresh
    testbed.kubectl("apply", "-k", str(REPO / "controller" / "karmada"))
    for f in WEBHOOK_FILES:
        testbed.kubectl("apply", "-f", str(f))
    try:
        yield
    finally:
        testbed.kubectl("delete", "--ignore-not-found", "-k", str(REPO / "controller" / "karmada"))
        for f in WEBHOOK_FILES:
            testbed.kubectl("delete", "--ignore-not-found", "-f", str(f))
        testbed.kubectl("delete", *lease, "--ignore-not-found")


@pytest.fixture(scope="module")
async def admin(testbed: TestBed) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    yield client
    await client.close()


async def token_client(admin: KubeClient, account: tuple[str, str]) -> KubeClient:
    """A client with a fresh token of the ServiceAccount (TokenRequest API)."""
    ns, sa = account
    review = await admin.post(
        f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return KubeClient.from_token(admin.host, review["status"]["token"], insecure=True)


@pytest.fixture(scope="module")
async def controller_client(manifests: None, admin: KubeClient) -> AsyncIterator[KubeClient]:
    client = await token_client(admin, CONTROLLER_SA)
    yield client
    await client.close()


@pytest.fixture(scope="module")
async def webhook_client(manifests: None, admin: KubeClient) -> AsyncIterator[KubeClient]:
    client = await token_client(admin, WEBHOOK_SA)
    yield client
    await client.close()


async def status_of(client: KubeClient, method: str, path: str, body: Any = None) -> int:
    try:
        await client.request(method, path, body)
    except KubeError as e:
        return e.status
    except json.JSONDecodeError:
        return 200  # a watch answered with its stream of events
    return 200


@pytest.fixture
async def objects(admin: KubeClient, testbed: TestBed, manifests: None) -> dict[str, str]:
    ns = f"e2e-rbac-{secrets.token_hex(3)}"
    await admin.post("/api/v1/namespaces", {"metadata": {"name": ns}})
    await admin.post(
        f"/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas",
        product.quota(ns, "q", {"pods": "10"}),
    )
    await admin.post(
        f"/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings", binding(ns, "b")
    )
    # a resource template (no PropagationPolicy: Karmada leaves it alone) for the wake calls
    await admin.post(
        f"/apis/apps/v1/namespaces/{ns}/deployments", deployment(ns, "d", 0, {"cpu": "1m"})
    )
    # a cluster quota selecting nothing (docs/cluster-quotas.md)
    await admin.post(
        CKQ_ALL,
        {
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "ClusterKarmadaQuota",
            "metadata": {"name": ns},
            "spec": {"hard": {"pods": "1"}, "namespaceSelector": {"matchLabels": {"none": ns}}},
        },
    )
    return {"ns": ns, "member": testbed.members[0], "ckq": f"{CKQ_ALL}/{ns}"}


async def test_the_controller_can_make_every_call_it_makes_and_nothing_else(
    controller_client: KubeClient, admin: KubeClient, objects: dict[str, str]
) -> None:
    c, ns = controller_client, objects["ns"]
    quota = f"/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas/q"
    binding_path = f"/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings/b"
    template = f"/apis/apps/v1/namespaces/{ns}/deployments/d"
    current = await c.get(quota)
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "karmadaquota-controller", "namespace": "karmada-system"},
        "spec": {"holderIdentity": "rbac-test", "leaseDurationSeconds": 15},
    }
    allowed = {
        "list bindings": ("GET", RB_ALL, None),
        "watch bindings": ("GET", f"{RB_ALL}?watch=1&timeoutSeconds=1", None),
        "get a binding (orphan audit)": ("GET", binding_path, None),
        "list quotas": ("GET", QUOTAS_ALL, None),
        "watch quotas": ("GET", f"{QUOTAS_ALL}?watch=1&timeoutSeconds=1", None),
        "update quota status": ("PUT", f"{quota}/status", current),
        "list clusters": ("GET", "/apis/cluster.karmada.io/v1alpha1/clusters", None),
        "get a member's secret": (
            "GET",
            f"/api/v1/namespaces/karmada-cluster/secrets/{objects['member']}",
            None,
        ),
        "list CRDs (kopf)": ("GET", CRDS, None),
        "list namespaces (enforcement labels)": ("GET", "/api/v1/namespaces", None),
        "watch namespaces": ("GET", "/api/v1/namespaces?watch=1&timeoutSeconds=1", None),
        "create the Lease": ("POST", LEASES, lease),
        "get the Lease": ("GET", f"{LEASES}/karmadaquota-controller", None),
        "get a Deployment (wake audit)": ("GET", template, None),
        "get a PriorityClass (queue order)": (
            "GET",
            "/apis/scheduling.k8s.io/v1/priorityclasses/system-cluster-critical",
            None,
        ),
        "post an Event (Queued, Admitted)": (
            "POST",
            f"/api/v1/namespaces/{ns}/events",
            {
                "metadata": {"generateName": "d.", "namespace": ns},
                "involvedObject": {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "d",
                    "namespace": ns,
                },
                "reason": "Queued",
                "message": "rbac test",
                "type": "Normal",
                "source": {"component": "karmadaquota-controller"},
            },
        ),
    }
    ckq = objects["ckq"]
    view = {
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "AppliedClusterKarmadaQuota",
        "metadata": {"name": "v", "namespace": ns},
        "status": {"clusterQuota": "v"},
    }
    views = f"/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/appliedclusterkarmadaquotas"
    allowed |= {
        "list cluster quotas": ("GET", CKQ_ALL, None),
        "watch cluster quotas": ("GET", f"{CKQ_ALL}?watch=1&timeoutSeconds=1", None),
        "get a cluster quota (CAS retry)": ("GET", ckq, None),
        "update cluster quota status": ("PUT", f"{ckq}/status", await admin.get(ckq)),
        "list tenant views": ("GET", VIEWS_ALL, None),
        "watch tenant views": ("GET", f"{VIEWS_ALL}?watch=1&timeoutSeconds=1", None),
        "create a tenant view": ("POST", views, view),
    }
    got = {what: await status_of(c, *call) for what, call in allowed.items()}
    assert got == {what: 200 for what in allowed}, got
    stored_view = await admin.get(f"{views}/v")  # (the controller reads views by watch)
    assert await status_of(c, "PUT", f"{views}/v", stored_view) == 200
    assert await status_of(c, "DELETE", f"{views}/v") == 200
    # wake: the merge patch of one annotation the waker sends (controller/wake.py)
    patched = await c.merge_patch(
        template, {"metadata": {"annotations": {"quota.karmada.io/woken-at": "rbac-test"}}}
    )
    assert patched["metadata"]["annotations"]["quota.karmada.io/woken-at"] == "rbac-test"
    # leaving the queue: the merge patch on a resourceVersion the dequeuer sends (dequeue.py)
    rv = (await c.get(binding_path))["metadata"]["resourceVersion"]
    admitted = await c.request(
        "PATCH",
        binding_path,
        {"metadata": {"resourceVersion": rv, "annotations": {"quota.karmada.io/queued-by": None}}},
        content_type=MERGE_PATCH,
    )
    assert admitted["metadata"]["name"] == "b"
    # member guards: the merge patch of the finalizer the guard job sends (_set_finalizer)
    for finalizers in ([FINALIZER], []):
        rv = (await c.get(quota))["metadata"]["resourceVersion"]
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": rv}}
        got_q = await c.request("PATCH", quota, body, content_type=MERGE_PATCH)
        assert got_q["metadata"].get("finalizers", []) == finalizers
    # enforcement: the merge patch of the labels (controller/enforcement.py)
    labelled = await c.merge_patch(
        f"/api/v1/namespaces/{ns}",
        {"metadata": {"labels": {"quota.karmada.io/enforced": "true"}}},
    )
    assert labelled["metadata"]["labels"]["quota.karmada.io/enforced"] == "true"
    held = await c.get(f"{LEASES}/karmadaquota-controller")
    assert await status_of(c, "PUT", f"{LEASES}/karmadaquota-controller", held) == 200

    other_lease = {**lease, "metadata": {"name": "someone-else", "namespace": "karmada-system"}}
    await admin.post(LEASES, other_lease)
    try:
        forbidden = {
            "create a binding": ("POST", binding_path.rsplit("/", 1)[0], binding(ns, "x")),
            "delete a binding": ("DELETE", binding_path, None),
            "update a quota's spec": ("PUT", quota, await c.get(quota)),
            "delete a quota": ("DELETE", quota, None),
            "list secrets anywhere": ("GET", "/api/v1/secrets", None),
            "list member secrets": ("GET", "/api/v1/namespaces/karmada-cluster/secrets", None),
            "get a secret elsewhere": (
                "GET",
                "/api/v1/namespaces/karmada-system/secrets/karmadaquota-controller-token",
                None,
            ),
            "update another Lease": (
                "PUT",
                f"{LEASES}/someone-else",
                await admin.get(f"{LEASES}/someone-else"),
            ),
            "delete its Lease": ("DELETE", f"{LEASES}/karmadaquota-controller", None),
            "replace a binding": ("PUT", binding_path, await admin.get(binding_path)),
            "list PriorityClasses": ("GET", "/apis/scheduling.k8s.io/v1/priorityclasses", None),
            "replace a Deployment": ("PUT", template, await admin.get(template)),
            "delete a Deployment": ("DELETE", template, None),
            "get a DaemonSet": ("GET", f"/apis/apps/v1/namespaces/{ns}/daemonsets/d", None),
            "delete a cluster": (
                "DELETE",
                f"/apis/cluster.karmada.io/v1alpha1/clusters/{objects['member']}",
                None,
            ),
        }
        got = {what: await status_of(c, *call) for what, call in forbidden.items()}
        assert got == {what: 403 for what in forbidden}, got
    finally:
        await admin.request("DELETE", f"{LEASES}/someone-else")


async def test_the_webhook_can_make_every_call_it_makes_and_nothing_else(
    webhook_client: KubeClient, admin: KubeClient, objects: dict[str, str]
) -> None:
    w, ns = webhook_client, objects["ns"]
    quota = f"/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas/q"
    allowed = {
        "list quotas": ("GET", QUOTAS_ALL, None),
        "watch quotas": ("GET", f"{QUOTAS_ALL}?watch=1&timeoutSeconds=1", None),
        "get a quota (CAS retry)": ("GET", quota, None),
        "update quota status": ("PUT", f"{quota}/status", await admin.get(quota)),
        "list cluster quotas": ("GET", CKQ_ALL, None),
        "watch cluster quotas": ("GET", f"{CKQ_ALL}?watch=1&timeoutSeconds=1", None),
        "get a cluster quota (CAS retry)": ("GET", objects["ckq"], None),
        "update cluster quota status": (
            "PUT",
            f"{objects['ckq']}/status",
            await admin.get(objects["ckq"]),
        ),
        "list namespaces (cluster quotas' selectors)": ("GET", "/api/v1/namespaces", None),
        "watch namespaces": ("GET", "/api/v1/namespaces?watch=1&timeoutSeconds=1", None),
        # their Ready condition: replicas evicted from one not Ready are released (evictions)
        "list clusters": ("GET", CLUSTERS, None),
        "watch clusters": ("GET", f"{CLUSTERS}?watch=1&timeoutSeconds=1", None),
    }
    got = {what: await status_of(w, *call) for what, call in allowed.items()}
    assert got == {what: 200 for what in allowed}, got
    lease = {"metadata": {"name": "w", "namespace": "karmada-system"}, "spec": {}}
    forbidden: dict[str, tuple[str, str, Any]] = {
        "list bindings": ("GET", RB_ALL, None),
        "update a quota's spec": ("PUT", quota, await admin.get(quota)),
        "delete a quota": ("DELETE", quota, None),
        "read secrets": ("GET", "/api/v1/namespaces/karmada-cluster/secrets", None),
        "get a cluster": ("GET", f"{CLUSTERS}/{objects['member']}", None),
        "create a Lease": ("POST", LEASES, lease),
        # a review has no side effect: labelling namespaces is the controller's
        "patch a namespace": ("PATCH", f"/api/v1/namespaces/{ns}", {"metadata": {}}),
        "update a cluster quota's spec": ("PUT", objects["ckq"], await admin.get(objects["ckq"])),
        "list tenant views": ("GET", VIEWS_ALL, None),
    }
    got = {what: await status_of(w, *call) for what, call in forbidden.items()}
    assert got == {what: 403 for what in forbidden}, got
