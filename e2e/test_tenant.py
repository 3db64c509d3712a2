"""A namespace editor tries every route past the quota (issue 29), on the real bed.

The tenant is an impersonated user (`kubectl --as alice`) bound in the namespace to exactly
Kubernetes' `edit` ClusterRole plus the rules of Karmada's `karmada-edit` ClusterRole
(`artifacts/deploy/admin-clusterrole-aggregation.yaml`: create/update/patch/delete on
propagationpolicies, overridepolicies, resourcebindings(/status), works(/status), ...). Every
route the issue measured is tried as that user, and what is asserted is what the member clusters
run — pods counted in each member, polled every 100 ms throughout each test by
`members_within`, whose oracle is the pods themselves, not the product's `charge()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from e2e.testbed import TestBed, product, tenant
from e2e.testbed.aio import InvariantViolation, Within, eventually, within
from e2e.testbed.cluster import LINGER_ANNOTATION
from e2e.testbed.layout import KARMADA
from e2e.testbed.workloads import deployment, divided_policy
from karmadaquota.kube.client import JSON, KubeClient, KubeError, NotFound

pytestmark = pytest.mark.e2e

TENANT = tenant.USER
CPU = {"cpu": "100m"}
BINDINGS = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"
QUOTAS = "/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas"
ENFORCED = "quota.karmada.io/enforced"


@dataclass
class Stack:
    bed: TestBed
    api: KubeClient
    members: dict[str, KubeClient]
    controller: product.Proc


@pytest.fixture(scope="module")
async def stack(testbed: TestBed) -> AsyncIterator[Stack]:
    await asyncio.to_thread(product.install_crd, testbed)
    controller, _ = product.start_controller(testbed, "controller-tenant")
    hook = await product.start_webhook(testbed, "webhook-tenant")
    api = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    members = {
        m: await KubeClient.connect(str(testbed.member_kubeconfig(m))) for m in testbed.members
    }
    try:
        await asyncio.to_thread(product.register, testbed, hook.base, hook.ca_bundle)
        yield Stack(testbed, api, members, controller)
    finally:
        await asyncio.to_thread(product.unregister, testbed)
        hook.proc.stop()
        controller.stop()
        print(f"--- controller log ---\n{controller.tail(40)}")
        await api.close()
        for c in members.values():
            await c.close()


@pytest.fixture
async def ns(stack: Stack, namespace: str) -> str:
    """The test's namespace, with `alice` bound to edit + karmada-edit in it."""
    await tenant.grant(stack.bed, namespace)
    return namespace


async def as_tenant(
    s: Stack, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl as the tenant; never raises (the caller reads the refusal)."""
    return await s.bed.akubectl("--as", TENANT, *args, input=input, check=False)


async def tenant_apply(s: Stack, *objects: JSON) -> None:
    """Apply as the tenant, which must be allowed."""
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
    got = await as_tenant(s, "apply", "-f", "-", input=doc)
    assert got.returncode == 0, got.stderr


async def member_items(s: Stack, path: str) -> dict[str, list[JSON]]:
    """The objects each member holds at the collection `path` (none where it is not found)."""
    out: dict[str, list[JSON]] = {}
    for m, client in s.members.items():
        try:
            out[m] = (await client.get(path)).get("items", [])
        except NotFound:
            out[m] = []
    return out


async def member_pods(s: Stack, ns: str) -> dict[str, list[JSON]]:
    """Every pod of the namespace in each member, those in their grace period included."""
    return await member_items(s, f"/api/v1/namespaces/{ns}/pods")


async def running(s: Stack, ns: str, terminating: bool = False) -> dict[str, int]:
    """Pods in each member: what Karmada runs there for the namespace; not those being
    deleted, unless `terminating` (Kubernetes' quota counts a pod until it is gone)."""
    return {
        m: sum(1 for p in pods if terminating or not p["metadata"].get("deletionTimestamp"))
        for m, pods in (await member_pods(s, ns)).items()
    }


def members_within(s: Stack, ns: str, hard: int) -> contextlib.AbstractAsyncContextManager[Within]:
    """Σ pods the members run (those in their grace period included) stays within `hard`
    throughout the block."""

    async def pods() -> tuple[int, dict[str, int]]:
        now = await running(s, ns, terminating=True)
        return sum(now.values()), now

    return within(pods, hard, "pods")


async def quota(
    s: Stack, ns: str, opt_out: bool = False, guarded: bool = False, **hard: str
) -> None:
    """The namespace's quota `team` of `hard`: member guards on (the default), or, `opt_out`,
    admission alone (`memberEnforcement: None`), whose own allow-lists are then what holds;
    `guarded` says `memberEnforcement: ResourceQuota` explicitly, for a test whose bound the
    members' guards hold (it must not change meaning with the default)."""
    assert not (opt_out and guarded)
    spec = {"memberEnforcement": "None"} if opt_out else {}
    if guarded:
        spec = {"memberEnforcement": "ResourceQuota"}
    await s.bed.aapply(product.quota(ns, "team", dict(hard), **spec))

    async def enforced() -> bool:
        q = await s.api.get(QUOTAS.format(ns=ns) + "/team")
        conditions = {c["type"]: c for c in (q.get("status") or {}).get("conditions", [])}
        used = set((q.get("status") or {}).get("used") or {})
        return conditions.get("Enforced", {}).get("status") == "True" and set(hard) <= used

    await eventually(enforced, 30, "the quota enforced and its usage known", interval=0.05)


async def settled(s: Stack, ns: str) -> None:
    """No pending charge left: every admitted binding counted, every create that failed after
    its admission (Karmada's detector racing itself: AlreadyExists) disproved by the orphan
    audit. Until then those charges hold quota (fail closed), and a refusal's `used` says so."""

    async def check() -> bool:
        q = await s.api.get(QUOTAS.format(ns=ns) + "/team")
        return not (q.get("status") or {}).get("pending")

    await eventually(check, 30, "no pending charge left", interval=0.05)


async def placed(s: Stack, ns: str, name: str, pods: int) -> JSON:
    """Wait until the Deployment's binding is placed and its pods run in the members."""

    async def check() -> JSON | None:
        try:
            rb = await s.api.get(BINDINGS.format(ns=ns) + f"/{name}-deployment")
        except NotFound:
            return None
        if not rb["spec"].get("clusters") or sum((await running(s, ns)).values()) != pods:
            return None
        return rb

    return await eventually(check, 60, f"{name} placed and {pods} pods running", interval=0.1)


def everywhere(ns: str, api_version: str, kind: str, name: str, members: list[str]) -> JSON:
    """A PropagationPolicy of one object to every member (the whole object in each)."""
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "resourceSelectors": [{"apiVersion": api_version, "kind": kind, "name": name}],
            "placement": {"clusterAffinity": {"clusterNames": members}},
        },
    }


def events_about(events: JSON, name: str) -> str:
    return "\n".join(
        e.get("message", "")
        for e in events.get("items", [])
        if e.get("involvedObject", {}).get("name") == name
    )


# ---------------------------------------------------------------------------------------------


async def test_a_tenant_cannot_rewrite_its_bindings(stack: Stack, ns: str) -> None:
    """The binding routes of the issue's table, each one kubectl call by the tenant: requiredBy
    with a second cluster, requests lowered, a graceful eviction task, the queue mode's
    annotation and suspension, a binding made by hand. Each is refused by name; the members
    keep running exactly the one pod the quota admitted."""
    s = stack
    members = list(s.members)
    await quota(s, ns, pods="2", **{"requests.cpu": "1"})
    await tenant_apply(s, deployment(ns, "web", 1, CPU), divided_policy(ns, "web", members[:1]))
    rb = await placed(s, ns, "web", 1)
    name = rb["metadata"]["name"]
    patches: dict[str, Any] = {
        "spec.requiredBy": {
            "spec": {
                "requiredBy": [
                    {
                        "namespace": ns,
                        "name": "x",
                        "clusters": [{"name": members[-1], "replicas": 5}],
                    }
                ]
            }
        },
        "spec.replicaRequirements": {
            "spec": {"replicaRequirements": {"resourceRequest": {"cpu": "1m"}}}
        },
        "spec.gracefulEvictionTasks": {
            "spec": {
                "gracefulEvictionTasks": [
                    {
                        "fromCluster": members[0],
                        "reason": "TaintUntolerated",
                        "producer": "alice",
                        "suppressDeletion": True,
                    }
                ],
                "clusters": [{"name": members[-1], "replicas": 1}],
            }
        },
        "spec.suspension": {
            "metadata": {"annotations": {"quota.karmada.io/queued-by": "team"}},
            "spec": {"suspension": {"scheduling": True}},
        },
    }
    async with members_within(s, ns, 1) as w:
        for field_name, patch in patches.items():
            got = await as_tenant(
                s, "patch", "rb", name, "-n", ns, "--type", "merge", "-p", json.dumps(patch)
            )
            assert got.returncode != 0, f"{field_name}: {got.stdout}"
            refusal = got.stderr.split(f'user "{TENANT}" may not change ', 1)[-1]
            assert field_name in refusal.split(" of a ResourceBinding")[0], got.stderr
        # a binding made by hand, pointing at the template with requests it does not carry
        forged = {k: v for k, v in rb.items() if k not in ("status",)}
        forged["metadata"] = {"name": "forged", "namespace": ns}
        forged["spec"] = {
            **rb["spec"],
            "replicas": 5,
            "clusters": [{"name": members[-1], "replicas": 5}],
        }
        got = await as_tenant(s, "create", "-f", "-", input=json.dumps(forged))
        assert got.returncode != 0
        assert f'user "{TENANT}" may not create a ResourceBinding' in got.stderr, got.stderr
        after = (await s.api.get(BINDINGS.format(ns=ns) + f"/{name}"))["spec"]
        for key in ("requiredBy", "gracefulEvictionTasks", "replicaRequirements", "clusters"):
            assert after.get(key) == rb["spec"].get(key), key
    assert await running(s, ns) == {members[0]: 1, **{m: 0 for m in members[1:]}}
    print(f"members ran at most {w.most} pods over {w.polls} polls")


async def test_a_tenant_cannot_opt_its_quota_out_of_the_guards(stack: Stack, ns: str) -> None:
    """Opting out of the member guards (`memberEnforcement: None`) is the weaker setting now
    that guards are on by default, so it must stay the platform team's: edit and karmada-edit
    hold no write on KarmadaQuotas, nor on ResourceQuotas Karmada could carry to a member; nor
    may a tenant put its quota in a cohort or write itself a loan (docs/cohorts.md). Each
    write is refused by the API server's RBAC, and the quota keeps the spec the platform wrote."""
    s = stack
    await quota(s, ns, pods="2")
    before = await s.api.get(QUOTAS.format(ns=ns) + "/team")
    own = product.quota(ns, "mine", {"pods": "100"}, memberEnforcement="None")
    rq = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "karmadaquota-team", "namespace": ns},
        "spec": {"hard": {"pods": "100"}},
    }
    team = QUOTAS.format(ns=ns) + "/team"
    opt_out = {"spec": {"memberEnforcement": "None", "hard": {"pods": "100"}}}
    tries: dict[str, tuple[str, str, Any]] = {
        "patch": ("PATCH", team, opt_out),
        "update": ("PUT", team, {**before, "spec": {**before["spec"], **opt_out["spec"]}}),
        "delete": ("DELETE", team, None),
        "create": ("POST", QUOTAS.format(ns=ns), own),
        "create resourcequotas": ("POST", f"/api/v1/namespaces/{ns}/resourcequotas", rq),
        # borrowing is the platform's too: joining a cohort, and the loans in the status
        "patch into a cohort": (
            "PATCH",
            team,
            {"spec": {"cohort": "everyone", "borrowingLimit": {"pods": "100"}}},
        ),
        "patch a loan": (
            "PATCH",
            team + "/status",
            {"status": {"borrowed": [{"quota": "other/team", "resources": {"pods": "100"}}]}},
        ),
    }
    client = tenant.impersonating(s.api)
    try:
        for what, (verb, path, body) in tries.items():
            kind = "application/merge-patch+json" if verb == "PATCH" else "application/json"
            with pytest.raises(KubeError) as refused:
                await client.request(verb, path, body, content_type=kind)
            assert refused.value.status == 403, (what, refused.value)
            assert f'User "{TENANT}" cannot {what.split()[0]} resource' in str(refused.value), what
    finally:
        await client.close()
    after = await s.api.get(QUOTAS.format(ns=ns) + "/team")
    assert after["spec"] == before["spec"]
    assert not (after.get("status") or {}).get("borrowed")
    assert not after["metadata"].get("deletionTimestamp")
    with pytest.raises(NotFound):
        await s.api.get(QUOTAS.format(ns=ns) + "/mine")
    with pytest.raises(NotFound):
        await s.api.get(f"/api/v1/namespaces/{ns}/resourcequotas/karmadaquota-team")


def override_policy(ns: str, name: str, overriders: JSON) -> JSON:
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "OverridePolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
            "overrideRules": [{"overriders": overriders}],
        },
    }


async def test_a_tenant_cannot_override_its_replicas(stack: Stack, ns: str) -> None:
    """An OverridePolicy replacing /spec/replicas with 5 ran 5 pods against pods=2: refused by
    a quota that opted out of member guards; an override of what is not charged is the tenant's
    to write."""
    s = stack
    members = list(s.members)
    await quota(s, ns, opt_out=True, pods="2", **{"requests.cpu": "1"})
    await tenant_apply(s, deployment(ns, "web", 1, CPU), divided_policy(ns, "web", members))
    await placed(s, ns, "web", 1)

    def override(name: str, path: str, value: Any) -> JSON:
        op = {"path": path, "operator": "replace", "value": value}
        return override_policy(ns, name, {"plaintext": [op]})

    async with members_within(s, ns, 1):
        got = await as_tenant(
            s, "create", "-f", "-", input=json.dumps(override("more", "/spec/replicas", 5))
        )
        assert got.returncode != 0
        assert "may not write an override off the allow-list" in got.stderr, got.stderr
        assert "replace /spec/replicas" in got.stderr
        sized = override("sized", "/spec/template/spec/containers/0/resources/requests/cpu", "4")
        got = await as_tenant(s, "create", "-f", "-", input=json.dumps(sized))
        assert got.returncode != 0 and "resources/requests/cpu" in got.stderr, got.stderr
        labels = override("labels", "/metadata/labels", {"team": "a"})
        await tenant_apply(s, labels)
    assert sum((await running(s, ns)).values()) == 1


async def test_an_override_admission_cannot_price_is_admitted_and_bounded_by_the_guards(
    stack: Stack, ns: str
) -> None:
    """Issue 42: where member guards bound the namespace (the default), an override admission
    cannot price is admitted — 5 replicas in the member for a binding charged 1 — and the
    member's guard holds what runs: never more than pods=2 at any poll, the member's own
    ReplicaSet refused past its guard in Kubernetes' words. A rename is still refused: it would
    leave the guards' name."""
    s = stack
    members = list(s.members)
    await quota(s, ns, pods="2", **{"requests.cpu": "1"})
    await tenant_apply(s, deployment(ns, "web", 1, CPU), divided_policy(ns, "web", members))
    await placed(s, ns, "web", 1)
    op = {"path": "/spec/replicas", "operator": "replace", "value": 5}
    async with members_within(s, ns, 2) as w:
        await tenant_apply(s, override_policy(ns, "more", {"plaintext": [op]}))

        async def asked() -> bool:
            found = await member_deployments(s, ns)
            replicas = [d["spec"]["replicas"] for ds in found.values() for d in ds]
            return replicas == [5]

        await eventually(asked, 60, "5 replicas asked for in the member", interval=0.2)

        async def held_by_the_guard() -> bool:
            for sets in (
                await member_items(s, f"/apis/apps/v1/namespaces/{ns}/replicasets")
            ).values():
                for rs in sets:
                    for c in (rs.get("status") or {}).get("conditions") or []:
                        if "exceeded quota: karmadaquota-team" in (c.get("message") or ""):
                            return True
            return False

        await eventually(held_by_the_guard, 60, "the member's guard refusing", interval=0.2)
        renamed = {"path": "/metadata/name", "operator": "replace", "value": "web-2"}
        doc = json.dumps(override_policy(ns, "renamed", {"plaintext": [renamed]}))
        got = await as_tenant(s, "create", "-f", "-", input=doc)
        assert got.returncode != 0 and "replace /metadata/name" in got.stderr, got.stderr
    print(f"members ran at most {w.most} pods (terminating counted) over {w.polls} polls")


async def member_deployments(s: Stack, ns: str) -> dict[str, list[JSON]]:
    """The Deployments each member holds in the namespace."""
    return await member_items(s, f"/apis/apps/v1/namespaces/{ns}/deployments")


async def test_issue_34s_overrides_are_refused_and_everyday_ones_rendered(
    stack: Stack, ns: str
) -> None:
    """Issue 34, as the tenant: an OverridePolicy renaming the workload (3 Deployments of one
    1-replica binding ran under pods=1) or moving it to another namespace of the member, an
    imageOverrider whose predicate rewrote requests.cpu (2 x 2 cpu under requests.cpu=1), and
    one on /spec/strategy and /spec/minReadySeconds (4 pods under pods=2) are each refused by
    name; an image and a label override are still the tenant's, and Karmada renders them in the
    member. (A quota that opted out of member guards: under guards the predicate and surge
    overrides are admitted and bounded in the members, `test_an_override_admission_cannot_
    price_is_admitted_and_bounded_by_the_guards`.)

    The bound is the workload's own, exactly: pods=1 and requests.cpu=100m for one replica of
    100m that rolls `Recreate` (the image override's rollout stops the old pod before it starts
    the new one), polled at every 100 ms, terminating pods counted. So each attack, had it been
    admitted, fails it: the rename runs a second Deployment's pod beside `web`, the predicate
    a pod of more cpu, the surge override a new pod beside the old one during the image
    override's rollout (maxSurge 100 %, never Ready for an hour); the move is looked for in the
    member's `default` namespace once the everyday overrides are rendered."""
    s = stack
    members = list(s.members)
    await quota(s, ns, opt_out=True, pods="1", **{"requests.cpu": "100m"})
    web = deployment(ns, "web", 1, CPU)
    web["spec"]["strategy"] = {"type": "Recreate"}
    await tenant_apply(s, web, divided_policy(ns, "web", members[:1]))
    await placed(s, ns, "web", 1)
    plain = lambda path, value: {  # noqa: E731
        "plaintext": [{"path": path, "operator": "replace", "value": value}]
    }
    cpu = "/spec/template/spec/containers/0/resources/requests/cpu"
    attacks = {
        "renamed": (plain("/metadata/name", "web-2"), "replace /metadata/name"),
        "moved": (plain("/metadata/namespace", "default"), "replace /metadata/namespace"),
        "predicate": (
            {
                "imageOverrider": [
                    {
                        "predicate": {"path": cpu},
                        "component": "Tag",
                        "operator": "replace",
                        "value": "2",
                    }
                ]
            },
            f"predicate.path {cpu}",
        ),
        "surge": (
            {
                "plaintext": [
                    {
                        "path": "/spec/strategy",
                        "operator": "replace",
                        "value": {"rollingUpdate": {"maxSurge": "100%", "maxUnavailable": 0}},
                    },
                    {"path": "/spec/minReadySeconds", "operator": "add", "value": 3600},
                ]
            },
            "replace /spec/strategy",
        ),
    }
    async with footprint_within(s, ns, {"pods": 1, "requests.cpu": 100}) as w:
        for name, (overriders, rule) in attacks.items():
            doc = json.dumps(override_policy(ns, name, overriders))
            got = await as_tenant(s, "create", "-f", "-", input=doc)
            assert got.returncode != 0, f"{name}: {got.stdout}"
            assert f'user "{TENANT}" may not write an override off the allow-list' in got.stderr
            assert f"{rule}" in got.stderr and "not on the allow-list" in got.stderr, got.stderr
        # the surge attack names both of its paths
        assert "add /spec/minReadySeconds: not on the allow-list" in got.stderr, got.stderr
        # what tenants override every day is admitted and rendered in the member
        everyday = override_policy(
            ns,
            "everyday",
            {
                "imageOverrider": [{"component": "Tag", "operator": "replace", "value": "1.27"}],
                "labelsOverrider": [{"operator": "add", "value": {"team": "a"}}],
            },
        )
        await tenant_apply(s, everyday)

        async def rendered() -> dict[str, list[JSON]] | None:
            found = await member_deployments(s, ns)
            web = next((d for d in found[members[0]] if d["metadata"]["name"] == "web"), None)
            if web is None:
                return None
            image = web["spec"]["template"]["spec"]["containers"][0]["image"]
            label = (web["metadata"].get("labels") or {}).get("team")
            return found if (image, label) == ("nginx:1.27", "a") else None

        found = await eventually(rendered, 60, "the image and label overrides rendered", 0.2)
        # one Deployment under its own name, in the one member it was placed in
        assert {m: [d["metadata"]["name"] for d in ds] for m, ds in found.items()} == {
            members[0]: ["web"],
            **{m: [] for m in members[1:]},
        }
        # ... and none moved to another namespace of a member (the "moved" attack)
        for m, client in s.members.items():
            try:
                await client.get("/apis/apps/v1/namespaces/default/deployments/web")
            except NotFound:
                continue
            raise AssertionError(f"{m} runs web in its default namespace")

        # the image override's rollout, polled to its end: one pod of the new image, Ready,
        # the old one gone (where an admitted surge override would run two)
        async def rolled_out() -> bool:
            pods = [p for ps in (await member_pods(s, ns)).values() for p in ps]
            images = [p["spec"]["containers"][0]["image"] for p in pods]
            conditions = [c for p in pods for c in (p.get("status") or {}).get("conditions", [])]
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            return images == ["nginx:1.27"] and ready

        await eventually(rolled_out, 60, "the overridden image's one pod Ready", 0.2)
        assert [
            p["metadata"]["name"]
            for p in (
                await s.api.get(
                    f"/apis/policy.karmada.io/v1alpha1/namespaces/{ns}/overridepolicies"
                )
            )["items"]
        ] == ["everyday"]
    print(f"members ran at most {w.most} pods over {w.polls} polls")


async def test_an_untrusted_writers_cluster_override_policy_is_held_to_the_list(
    stack: Stack, ns: str
) -> None:
    """karmada-edit grants no ClusterOverridePolicy; an installation may grant one to an
    identity it does not trust (here `bob`, bound to exactly that). The cluster-scoped rule
    reaches the webhook (the namespaceSelector does not filter cluster-scoped objects): bob's
    rename of the Deployments of a namespace with a quota is refused; the same policy for a
    namespace without one, and an admin's, are admitted (server-side dry runs: nothing stored)."""
    s = stack
    await quota(s, ns, pods="2")
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "e2e-cluster-overrides"},
        "rules": [
            {
                "apiGroups": ["policy.karmada.io"],
                "resources": ["clusteroverridepolicies"],
                "verbs": ["create", "update", "patch", "get"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "e2e-cluster-overrides-bob"},
        "roleRef": {
            "apiGroup": role["apiVersion"].split("/")[0],
            "kind": "ClusterRole",
            "name": "e2e-cluster-overrides",
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}],
    }
    await s.bed.aapply([role, binding])

    def rename(namespace: str) -> str:
        doc = override_policy(
            namespace,
            "rename",
            {"plaintext": [{"path": "/metadata/name", "operator": "replace", "value": "x"}]},
        )
        doc["kind"] = "ClusterOverridePolicy"
        doc["metadata"] = {"name": f"rename-{namespace}"}
        doc["spec"]["resourceSelectors"][0]["namespace"] = namespace
        return json.dumps(doc)

    create = ("create", "--dry-run=server", "-f", "-")
    got = await s.bed.akubectl("--as", "bob", *create, input=rename(ns), check=False)
    assert got.returncode != 0, got.stdout
    assert (
        f'clusteroverridepolicies.policy.karmada.io "rename-{ns}" is forbidden: user "bob" may '
        "not write an override off the allow-list" in got.stderr
    ), got.stderr
    assert "replace /metadata/name: not on the allow-list" in got.stderr
    # a namespace without a quota: admitted once the webhook's namespace informer has seen it
    # (a namespace it cannot see is refused 'try again' while cluster quotas exist: fail closed)
    free = f"{ns}-free"
    await s.bed.aapply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": free}})

    async def admitted() -> bool:
        got = await s.bed.akubectl("--as", "bob", *create, input=rename(free), check=False)
        assert "try again" in got.stderr or got.returncode == 0, got.stderr
        return got.returncode == 0

    await eventually(admitted, 30, "bob's policy for a namespace without a quota admitted")
    got = await s.bed.akubectl(*create, input=rename(ns), check=False)
    assert got.returncode == 0, got.stderr


async def test_what_karmada_cannot_count_is_refused_with_the_way_out(stack: Stack, ns: str) -> None:
    """A DaemonSet (no replicas in its binding) and a PropagationPolicy that preserves what it
    ran after deletion: both propagated uncharged before. Refused by the quota that tracks pods
    and opted out of member guards, with the way out in the message; nothing of either runs in
    a member."""
    s = stack
    members = list(s.members)
    await quota(s, ns, opt_out=True, pods="2", **{"requests.cpu": "1"})
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "containers": [{"name": "a", "image": "nginx", "resources": {"requests": CPU}}]
                },
            },
        },
    }
    ds_policy = everywhere(ns, "apps/v1", "DaemonSet", "agent", members)
    keep_policy = divided_policy(ns, "keep", members, "keep")
    keep_policy["spec"]["preserveResourcesOnDeletion"] = True
    async with members_within(s, ns, 0):
        await tenant_apply(s, daemonset, ds_policy, deployment(ns, "keep", 1, CPU), keep_policy)

        async def refused() -> bool:
            events = await s.api.get(f"/api/v1/namespaces/{ns}/events")
            return "Karmada cannot count its replicas" in events_about(
                events, "agent"
            ) and "preserveResourcesOnDeletion" in events_about(events, "keep")

        await eventually(refused, 60, "both refused, in the templates' events", interval=0.2)
        events = await s.api.get(f"/api/v1/namespaces/{ns}/events")
        assert "set memberEnforcement: ResourceQuota" in events_about(events, "agent")
        for binding in ("agent-daemonset", "keep-deployment"):
            with pytest.raises(NotFound):
                await s.api.get(BINDINGS.format(ns=ns) + f"/{binding}")
    assert await running(s, ns) == {m: 0 for m in members}


async def test_a_replication_controller_is_charged_its_pods_and_refused_past_the_hard(
    stack: Stack, ns: str
) -> None:
    """The issue's ReplicationController: its binding carries no replicas, so it ran 5 × 500m
    in every member under pods=1, requests.cpu=1 while `status.used` said pods=0. It is now
    charged what each member runs (the template's 5 replicas in every cluster Karmada renders it
    into: docs/charging.md) and refused past the hard; no member runs a pod of it at any poll."""
    s = stack
    members = list(s.members)
    await quota(s, ns, pods="1", **{"requests.cpu": "1"})
    rc = {
        "apiVersion": "v1",
        "kind": "ReplicationController",
        "metadata": {"name": "rc", "namespace": ns},
        "spec": {
            "replicas": 5,
            "selector": {"app": "rc"},
            "template": {
                "metadata": {"labels": {"app": "rc"}},
                "spec": {
                    "containers": [
                        {"name": "a", "image": "nginx", "resources": {"requests": {"cpu": "500m"}}}
                    ]
                },
            },
        },
    }
    policy = everywhere(ns, "v1", "ReplicationController", "rc", members)
    async with members_within(s, ns, 0):
        await tenant_apply(s, rc, policy)
        want = "requested: pods=5"  # at its create, before Karmada places it anywhere

        async def refused() -> bool:
            events = await s.api.get(f"/api/v1/namespaces/{ns}/events")
            message = events_about(events, "rc")
            return "exceeded quota: team" in message and want in message

        await eventually(refused, 60, "the binding refused, in the template's events", interval=0.2)
        with pytest.raises(NotFound):
            await s.api.get(BINDINGS.format(ns=ns) + "/rc-replicationcontroller")
        for client in s.members.values():
            with pytest.raises(NotFound):
                await client.get(f"/api/v1/namespaces/{ns}/replicationcontrollers/rc")
    assert await running(s, ns) == {m: 0 for m in members}


async def test_propagate_deps_carries_a_deployment_s_configmap_and_secret_into_a_quota(
    stack: Stack, ns: str
) -> None:
    """A false refusal of the issue: with `propagateDeps: true` the ConfigMap a Deployment
    reads gets a binding whose `requiredBy` carries the Deployment's replicas; it was charged
    them again and refused ('must specify requests.cpu'), so it never reached the member. In
    a quota with room, the Deployment's pods run and its ConfigMap and Secret reach every
    member running them, each charged as one object."""
    s = stack
    members = list(s.members)
    hard = {"pods": "4", "requests.cpu": "1", "configmaps": "2", "count/secrets": "2"}
    await quota(s, ns, **hard)
    web = deployment(ns, "web", 2, CPU)
    web["spec"]["template"]["spec"]["containers"][0]["envFrom"] = [
        {"configMapRef": {"name": "app-config"}},
        {"secretRef": {"name": "app-secret"}},
    ]
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "app-config", "namespace": ns},
        "data": {"MODE": "prod"},
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "app-secret", "namespace": ns},
        "stringData": {"TOKEN": "t"},
    }
    policy = divided_policy(ns, "web", members, "web")
    policy["spec"]["propagateDeps"] = True
    async with members_within(s, ns, 2):
        await tenant_apply(s, config, secret, web, policy)

        async def arrived() -> bool:
            pods = await running(s, ns)
            if sum(pods.values()) != 2:
                return False
            for m, n in pods.items():
                if n == 0:
                    continue
                for path in ("configmaps/app-config", "secrets/app-secret"):
                    try:
                        await s.members[m].get(f"/api/v1/namespaces/{ns}/{path}")
                    except NotFound:
                        return False
            return True

        await eventually(arrived, 90, "2 pods, and their ConfigMap and Secret beside them")
        await settled(s, ns)
        used = (await s.api.get(QUOTAS.format(ns=ns) + "/team"))["status"]["used"]
        # docs/charging.md: 2 replicas × 100m, and one object for each dependency
        assert used == {
            "pods": "2",
            "requests.cpu": "200m",
            "configmaps": "1",
            "count/secrets": "1",
        }


async def test_a_removed_enforcement_label_comes_back_within_a_second(
    stack: Stack, ns: str
) -> None:
    """The label removed (whoever may patch namespaces, or a GitOps tool rewriting labels):
    the controller puts it back within a second and Enforced tells the truth meanwhile."""
    s = stack
    await quota(s, ns, pods="1")
    ns_path = f"/api/v1/namespaces/{ns}"
    removed = time.monotonic()
    await s.api.merge_patch(ns_path, {"metadata": {"labels": {ENFORCED: None}}})

    async def back() -> bool:
        labels = (await s.api.get(ns_path))["metadata"].get("labels") or {}
        return labels.get(ENFORCED) == "true"

    await eventually(back, 10, "the enforcement label put back", interval=0.02)
    took = time.monotonic() - removed
    print(f"label back {took:.3f}s after it was removed")
    assert took < 1.0
    # the tenant itself may not touch the namespace at all (edit grants no namespace writes)
    got = await as_tenant(s, "label", "namespace", ns, f"{ENFORCED}-")
    assert got.returncode != 0 and "forbidden" in got.stderr.lower()


def _cpu_millis(value: str) -> int:
    """A cpu quantity in millicores (the oracle's own parser: m or whole cores only)."""
    return int(value[:-1]) if value.endswith("m") else int(float(value) * 1000)


def _rfc3339(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def quota_counts(pod: JSON, now: datetime | None = None) -> bool:
    """Whether Kubernetes' ResourceQuota counts the pod (`QuotaV1Pod`, written from its rule):
    not once it is Succeeded or Failed; a pod being deleted (`deletionTimestamp` and
    `deletionGracePeriodSeconds` both set) until now is after deletionTimestamp + that grace
    (a pod stuck terminating on a lost node then stops counting); every other pod, in its
    termination grace period included, counts."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    meta = pod["metadata"]
    deleted, grace = meta.get("deletionTimestamp"), meta.get("deletionGracePeriodSeconds")
    if deleted and grace is not None:
        now = now or datetime.now(UTC)
        return not now > _rfc3339(deleted) + timedelta(seconds=int(grace))
    return True


async def running_cpu(s: Stack, ns: str) -> int:
    """Σ cpu the members' pods request, as Kubernetes' quota charges them: every pod it counts
    (`quota_counts`: terminating ones until their grace has passed), each its containers plus
    its sidecars (restartable init containers); the test's pods have no other init containers."""
    total = 0
    for client in s.members.values():
        try:
            pods = await client.get(f"/api/v1/namespaces/{ns}/pods")
        except NotFound:
            continue
        now = datetime.now(UTC)
        for p in pods.get("items", []):
            if not quota_counts(p, now):
                continue
            spec = p["spec"]
            sidecars = [c for c in spec.get("initContainers", []) if c.get("restartPolicy")]
            for c in [*spec["containers"], *sidecars]:
                cpu = ((c.get("resources") or {}).get("requests") or {}).get("cpu")
                total += _cpu_millis(cpu) if cpu else 0
    return total


def cpu_within(
    s: Stack, ns: str, hard_millis: int
) -> contextlib.AbstractAsyncContextManager[Within]:
    """Σ cpu the members' pods request (millicores), terminating ones counted as Kubernetes'
    quota counts them (`running_cpu`), stays within the hard throughout."""

    async def cpu() -> tuple[int, int]:
        now = await running_cpu(s, ns)
        return now, now

    return within(cpu, hard_millis, "cpu millicores")


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def _bytes(value: str) -> int:
    """A memory quantity in bytes (the oracle's own parser: Ki, Mi, Gi or plain bytes)."""
    factor = _BINARY.get(value[-2:])
    return int(value[:-2]) * factor if factor else int(value)


async def footprint(s: Stack, ns: str) -> dict[str, int]:
    """What the members' pods (those in their grace period included) hold, as Kubernetes'
    quota charges them: pods, and Σ container requests and limits of cpu (millicores) and
    memory (bytes); the tests using it run pods without init containers."""
    total = dict.fromkeys(
        ("pods", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"), 0
    )
    for pods in (await member_pods(s, ns)).values():
        for p in pods:
            total["pods"] += 1
            for c in p["spec"]["containers"]:
                for kind, values in (c.get("resources") or {}).items():
                    for name, value in values.items():
                        parse = _cpu_millis if name == "cpu" else _bytes
                        total[f"{kind}.{name}"] += parse(value)
    return total


def footprint_within(
    s: Stack, ns: str, hard: dict[str, int]
) -> contextlib.AbstractAsyncContextManager[Within]:
    """The members' `footprint` stays within `hard` (same units) throughout the block: the
    measure is the fullest resource, in thousandths of its hard."""

    async def fill() -> tuple[int, dict[str, int]]:
        now = await footprint(s, ns)
        return max(-(-1000 * now[k] // v) for k, v in hard.items()), now

    return within(fill, 1000, f"thousandths of {hard}")


def with_sidecar(ns: str, name: str, cpu: str, sidecar_cpu: str) -> JSON:
    d = deployment(ns, name, 1, {"cpu": cpu})
    d["spec"]["template"]["spec"]["initContainers"] = [
        {
            "name": "proxy",
            "image": "envoy",
            "restartPolicy": "Always",
            "resources": {"requests": {"cpu": sidecar_cpu}},
        }
    ]
    return d


async def refused_event(s: Stack, ns: str, name: str, text: str) -> str:
    async def seen() -> str | None:
        events = await s.api.get(f"/api/v1/namespaces/{ns}/events")
        found = events_about(events, name)
        return found if text in found else None

    return await eventually(seen, 60, f"{name} refused: {text}", interval=0.2)


def label_override(ns: str) -> JSON:
    """A harmless OverridePolicy (a label): any editor may create it, and Karmada then renders
    every binding of the namespace again, from the resource template as it is now."""
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "OverridePolicy",
        "metadata": {"name": "label", "namespace": ns},
        "spec": {
            "overrideRules": [
                {"overriders": {"labelsOverrider": [{"operator": "add", "value": {"x": "y"}}]}}
            ]
        },
    }


async def rendered_again(s: Stack, ns: str, name: str, members: list[str]) -> dict[str, JSON]:
    """The Deployment `name` in each of `members`, once Karmada rendered `label_override`
    into all of them: what they run after Karmada's sync, whatever the template says."""

    async def check() -> dict[str, JSON] | None:
        out = {}
        for m in members:
            try:
                d = await s.members[m].get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")
            except NotFound:
                return None
            if (d["metadata"].get("labels") or {}).get("x") != "y":
                return None
            out[m] = d
        return out

    return await eventually(check, 60, "the override rendered", interval=0.1)


async def test_a_sidecar_is_charged_as_kubernetes_charges_the_pod(stack: Stack, ns: str) -> None:
    """A 400m container beside a 400m sidecar: Karmada's replicaRequirements say 400m (their
    maximum), Kubernetes charges the pod 800m; a 300m Deployment after it does not fit 1 cpu."""
    s = stack
    members = list(s.members)
    await quota(s, ns, **{"requests.cpu": "1"})
    async with cpu_within(s, ns, 1000):
        await tenant_apply(
            s, with_sidecar(ns, "web", "400m", "400m"), divided_policy(ns, "web", members, "web")
        )
        await placed(s, ns, "web", 1)
        await settled(s, ns)
        await tenant_apply(
            s, deployment(ns, "db", 1, {"cpu": "300m"}), divided_policy(ns, "db", members, "db")
        )
        message = await refused_event(s, ns, "db", "exceeded quota")
        assert "requested: requests.cpu=300m, used: requests.cpu=800m" in message
    q = await s.api.get(QUOTAS.format(ns=ns) + "/team")
    assert q["status"]["used"]["requests.cpu"] == "800m"
    assert await running_cpu(s, ns) == 800


async def test_a_template_cannot_grow_past_the_quota(stack: Stack, ns: str) -> None:
    """The template is what Karmada renders on its next sync of the binding (an OverridePolicy
    event, a restart), whatever admission said of the binding's update: a growth that does not
    fit is refused at the template, one that fits reaches the members and `used`. The rollout
    to the grown pod (maxSurge 0) stays within the hard at every poll, the old pod counted
    while it terminates: the member's guard (memberEnforcement: ResourceQuota, said
    explicitly) makes the new pod wait for it, as Kubernetes' quota does."""
    s = stack
    members = list(s.members)
    await quota(s, ns, guarded=True, **{"requests.cpu": "1"})
    web = deployment(ns, "web", 1, {"cpu": "400m"})  # maxSurge 0: charged its replica alone
    async with cpu_within(s, ns, 1000):
        await tenant_apply(s, web, divided_policy(ns, "web", members, "web"))
        rb = await placed(s, ns, "web", 1)
        await settled(s, ns)
        patch = json.dumps(
            {
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [{"name": "app", "resources": {"requests": {"cpu": "2"}}}]
                        }
                    }
                }
            }
        )
        got = await as_tenant(s, "-n", ns, "patch", "deployment", "web", "-p", patch)
        assert got.returncode != 0
        assert "exceeded quota: team, requested: requests.cpu=1600m" in got.stderr
        # a harmless override makes Karmada render the binding again: the members still run
        # 400m (the refused growth reached no member)
        await tenant_apply(s, label_override(ns))
        clusters = [c["name"] for c in rb["spec"]["clusters"]]
        for d in (await rendered_again(s, ns, "web", clusters)).values():
            container = d["spec"]["template"]["spec"]["containers"][0]
            assert container["resources"]["requests"]["cpu"] == "400m", d["spec"]["template"]
        assert await running_cpu(s, ns) == 400
        fits = patch.replace('"2"', '"900m"')
        got = await as_tenant(s, "-n", ns, "patch", "deployment", "web", "-p", fits)
        assert got.returncode == 0, got.stderr

        async def grown() -> bool:
            q = await s.api.get(QUOTAS.format(ns=ns) + "/team")
            used = (q.get("status") or {}).get("used") or {}
            return used.get("requests.cpu") == "900m" and await running_cpu(s, ns) == 900

        await eventually(grown, 60, "the growth that fits counted and running", interval=0.2)


async def test_a_scale_up_from_zero_is_charged_in_every_member(stack: Stack, ns: str) -> None:
    """Karmada revises a member's replicas only when the binding has some (v1.17: or
    replicaRequirements): a Deployment at 0 replicas without requests is propagated to every
    candidate member, and on the binding's next sync each member gets the template's own
    replicas. So `kubectl scale` from 0 is charged in every member, at the template: 5 would be
    10 pods and is refused; a harmless override then makes Karmada render the binding again
    and the members still run none; 2 (4 pods) fits and reaches the members."""
    s = stack
    members = list(s.members)
    await quota(s, ns, pods="4")
    async with members_within(s, ns, 4):
        await tenant_apply(s, deployment(ns, "web", 0, {}), divided_policy(ns, "web", members))
        rb = await placed(s, ns, "web", 0)
        assert sorted(c["name"] for c in rb["spec"]["clusters"]) == sorted(members)
        await settled(s, ns)
        got = await as_tenant(s, "-n", ns, "scale", "deployment", "web", "--replicas=5")
        assert got.returncode != 0, got.stdout
        assert f"exceeded quota: team, requested: pods={5 * len(members)}," in got.stderr
        await tenant_apply(s, label_override(ns))
        again = await rendered_again(s, ns, "web", members)
        assert [int(d["spec"].get("replicas", 1)) for d in again.values()] == [0] * len(members)
        got = await as_tenant(s, "-n", ns, "scale", "deployment", "web", "--replicas=2")
        assert got.returncode == 0, got.stderr

        async def scaled() -> bool:
            q = await s.api.get(QUOTAS.format(ns=ns) + "/team")
            used = (q.get("status") or {}).get("used") or {}
            pending = (q.get("status") or {}).get("pending")
            return (
                used.get("pods") == "2"
                and not pending
                and sum((await running(s, ns)).values()) == 2
            )

        await eventually(scaled, 60, "the scale that fits counted and running", interval=0.2)


def member_hpa(ns: str, target: str, replicas: int) -> JSON:
    """A HorizontalPodAutoscaler holding `target` at exactly `replicas`: a member's HPA
    controller scales to minReplicas before it reads any metric (the bed has none)."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": target, "namespace": ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": replicas,
            "maxReplicas": replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 50},
                    },
                }
            ],
        },
    }


async def test_the_retain_replicas_label_is_refused_where_the_members_do_not_enforce(
    stack: Stack, ns: str
) -> None:
    """With `resourcetemplate.karmada.io/retain-replicas: "true"` on the rendered workload,
    Karmada keeps each member's own replicas: a HorizontalPodAutoscaler the tenant propagates
    to the members would size the workload there, and no charge counts that. The label, on the
    template or through an OverridePolicy, is refused by a quota that opted out of member
    guards (memberEnforcement: None); a Deployment created with it is not propagated.

    The tenant propagates such an HPA to every member first — for `db`, at 3 replicas — while
    the namespace has no quota yet (under one that tracks pods and opted out, an HPA is itself
    refused); each member's HPA controller is seen at work (it finds no `db` to scale). Then,
    under pods=2: `web` runs 1 pod; had `db` (1 replica, labelled) been admitted, it would fit
    the charge (2) and its member's HPA would run it at 3 — 4 pods, caught at the next poll."""
    s = stack
    members = list(s.members)
    label = "resourcetemplate.karmada.io/retain-replicas"
    hpa = member_hpa(ns, "db", 3)
    hpas = "autoscaling/v2", "HorizontalPodAutoscaler"
    await tenant_apply(s, hpa, everywhere(ns, *hpas, "db", members))

    async def hpa_at_work() -> bool:
        for client in s.members.values():
            try:
                got = await client.get(
                    f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/db"
                )
            except NotFound:
                return False
            conditions = (got.get("status") or {}).get("conditions") or []
            if not any(c.get("reason") == "FailedGetScale" for c in conditions):
                return False
        return True

    await eventually(hpa_at_work, 90, "every member's HPA for db, looking for db", interval=0.2)
    await quota(s, ns, opt_out=True, pods="2")
    async with members_within(s, ns, 2):
        await tenant_apply(
            s, deployment(ns, "web", 1, {"cpu": "100m"}), divided_policy(ns, "web", members)
        )
        await placed(s, ns, "web", 1)
        got = await as_tenant(s, "-n", ns, "label", "deployment", "web", f"{label}=true")
        assert got.returncode != 0, got.stdout
        assert f"cannot charge metadata.labels: {label}" in got.stderr, got.stderr
        assert "memberEnforcement: ResourceQuota" in got.stderr
        retain = label_override(ns)
        retain["spec"]["overrideRules"][0]["overriders"]["labelsOverrider"][0]["value"] = {
            label: "true"
        }
        doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": [retain]})
        got = await as_tenant(s, "apply", "-f", "-", input=doc)
        assert got.returncode != 0 and label in got.stderr, got.stderr
        labelled = deployment(ns, "db", 1, {"cpu": "100m"})
        labelled["metadata"]["labels"] = {label: "true"}
        await tenant_apply(s, labelled)
        await refused_event(s, ns, "db", f"cannot charge metadata.labels: {label}")
        with pytest.raises(NotFound):
            await s.api.get(BINDINGS.format(ns=ns) + "/db-deployment")
        for client in s.members.values():
            with pytest.raises(NotFound):
                await client.get(f"/apis/apps/v1/namespaces/{ns}/deployments/db")
        assert sum((await running(s, ns)).values()) == 1


async def test_a_quota_on_limits_charges_the_template_s_limits(stack: Stack, ns: str) -> None:
    """limits.cpu, which a binding cannot carry: a Deployment without a cpu limit is refused as
    Kubernetes refuses such a pod; with limits, the second one that does not fit is refused."""
    s = stack
    members = list(s.members)
    await quota(s, ns, **{"limits.cpu": "1"})
    # Σ limits within the hard, and no pod without a limit: only web's one pod ever runs
    async with footprint_within(s, ns, {"limits.cpu": 1000, "pods": 1}):
        await tenant_apply(
            s,
            deployment(ns, "bare", 1, {"cpu": "100m"}),
            divided_policy(ns, "bare", members, "bare"),
        )
        await refused_event(s, ns, "bare", "failed quota: team: must specify limits.cpu")
        limited = deployment(ns, "web", 1, {"cpu": "100m"})
        limits = {"cpu": "600m"}
        limited["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = limits
        await tenant_apply(s, limited, divided_policy(ns, "web", members, "web"))
        await placed(s, ns, "web", 1)
        await settled(s, ns)
        second = json.loads(json.dumps(limited).replace('"web"', '"api"'))
        await tenant_apply(s, second, divided_policy(ns, "api", members, "api"))
        message = await refused_event(s, ns, "api", "exceeded quota")
        assert "requested: limits.cpu=600m, used: limits.cpu=600m, limited: limits.cpu=1" in message
    pods = [p for ps in (await member_pods(s, ns)).values() for p in ps]
    assert [p["metadata"]["name"].split("-")[0] for p in pods] == ["web"], pods
    assert (await footprint(s, ns))["limits.cpu"] == 600


async def test_kubernetes_quota_e2e_values_with_limits(stack: Stack, ns: str) -> None:
    """Kubernetes' ResourceQuota e2e ("should verify ResourceQuota with terminating scopes",
    test/e2e/apimachinery/resource_quota.go) with its values, through Karmada: requests and
    limits counted per pod, the third pod refused, a deletion released (and the third woken
    into it)."""
    s = stack
    members = list(s.members)
    await quota(
        s,
        ns,
        pods="5",
        **{
            "requests.cpu": "1",
            "requests.memory": "500Mi",
            "limits.cpu": "2",
            "limits.memory": "1Gi",
        },
    )

    def pod_of(name: str) -> JSON:
        d = deployment(ns, name, 1, {"cpu": "500m", "memory": "200Mi"})
        container = d["spec"]["template"]["spec"]["containers"][0]
        container["resources"]["limits"] = {"cpu": "1", "memory": "400Mi"}
        return d

    async def used_is(**want: str) -> None:
        async def check() -> bool:
            q = await s.api.get(QUOTAS.format(ns=ns) + "/team")
            used = (q.get("status") or {}).get("used") or {}
            return all(used.get(k.replace("_", ".")) == v for k, v in want.items())

        await eventually(check, 60, f"used {want}", interval=0.1)

    hard = {
        "pods": 5,
        "requests.cpu": 1000,
        "requests.memory": 500 * 2**20,
        "limits.cpu": 2000,
        "limits.memory": 2**30,
    }
    async with footprint_within(s, ns, hard):  # what the members run, terminating pods too
        for name in ("one", "two"):
            await tenant_apply(s, pod_of(name), divided_policy(ns, name, members, name))
        await used_is(
            pods="2",
            requests_cpu="1",
            requests_memory="400Mi",
            limits_cpu="2",
            limits_memory="800Mi",
        )
        await settled(s, ns)
        await tenant_apply(s, pod_of("three"), divided_policy(ns, "three", members, "three"))
        message = await refused_event(s, ns, "three", "exceeded quota")
        assert (
            "requested: limits.cpu=1,limits.memory=400Mi,requests.cpu=500m,requests.memory=200Mi, "
            "used: limits.cpu=2,limits.memory=800Mi,requests.cpu=1,requests.memory=400Mi, "
            "limited: limits.cpu=2,limits.memory=1Gi,requests.cpu=1,requests.memory=500Mi"
        ) in message
        got = await as_tenant(s, "-n", ns, "delete", "deployment", "one")
        assert got.returncode == 0, got.stderr

        # the deletion released its room, and the refused `three` was woken into it (the wake,
        # a few milliseconds after the release): two pods again, `one`'s no longer among them
        async def two_and_three() -> bool:
            pods = [p for ps in (await member_pods(s, ns)).values() for p in ps]
            return sorted(p["metadata"]["name"].split("-")[0] for p in pods) == ["three", "two"]

        await eventually(two_and_three, 60, "three running in the room one left", interval=0.1)
        await used_is(
            pods="2",
            requests_cpu="1",
            requests_memory="400Mi",
            limits_cpu="2",
            limits_memory="800Mi",
        )
        await settled(s, ns)


async def test_a_rollout_s_surge_pods_are_charged(stack: Stack, ns: str) -> None:
    """A Deployment with Kubernetes' default strategy (maxSurge 25%) runs a surge pod beside
    its replica while it rolls: it is charged 2 pods up front, a rollout stays within the quota,
    and a strategy that would surge more is refused at the template when it does not fit.
    Without the surge charge, web and db would leave room for a third 1-pod Deployment, and
    web's rollout would then run 4 pods in the members against pods=3 (for 2 s at least: a new
    pod counts as available only after minReadySeconds, so the old one stays that long)."""
    s = stack
    members = list(s.members)
    await quota(s, ns, pods="3")
    web = deployment(ns, "web", 1, CPU)
    web["spec"]["strategy"] = {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
    }
    web["spec"]["minReadySeconds"] = 2
    async with members_within(s, ns, 3) as seen:  # terminating pods counted
        await tenant_apply(s, web, divided_policy(ns, "web", members, "web"))
        await placed(s, ns, "web", 1)
        await tenant_apply(
            s, deployment(ns, "db", 1, CPU), divided_policy(ns, "db", members, "db")
        )  # maxSurge 0: 1 pod
        await placed(s, ns, "db", 2)
        await settled(s, ns)
        # a third 1-pod Deployment (maxSurge 0): room for it only if web's surge is not charged
        await tenant_apply(
            s, deployment(ns, "api", 1, CPU), divided_policy(ns, "api", members, "api")
        )

        async def api_decided() -> str | None:
            events = events_about(await s.api.get(f"/api/v1/namespaces/{ns}/events"), "api")
            if "exceeded quota" in events:
                return events
            try:  # admitted: it runs, and web's rollout below shows what that costs
                await s.api.get(BINDINGS.format(ns=ns) + "/api-deployment")
            except NotFound:
                return None
            return "admitted" if sum((await running(s, ns)).values()) == 3 else None

        api = await eventually(api_decided, 60, "api refused or running", interval=0.1)
        # web rolls: its surge pod runs beside the old one, within what was charged
        image = json.dumps(
            {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "httpd"}]}}}}
        )
        got = await as_tenant(s, "-n", ns, "patch", "deployment", "web", "-p", image)
        assert got.returncode == 0, got.stderr

        async def rolled() -> bool:
            for client in s.members.values():
                pods = (await client.get(f"/api/v1/namespaces/{ns}/pods"))["items"]
                live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
                web_pods = [p for p in live if p["metadata"]["name"].startswith("web-")]
                if web_pods and all(
                    p["spec"]["containers"][0]["image"] == "httpd" for p in web_pods
                ):
                    return len(web_pods) == 1
            return False

        await eventually(rolled, 60, "web rolled to httpd", interval=0.1)
        assert "requested: pods=1, used: pods=3, limited: pods=3" in api, api

        async def counted() -> bool:  # the controller folds admitted charges within a second
            q = await s.api.get(QUOTAS.format(ns=ns) + "/team")
            return bool(q["status"]["used"]["pods"] == "3")  # web 1 + its surge, db 1

        await eventually(counted, 30, "used: web 1 + its surge, db 1")
        # db may not surge now: nothing is left for its surge pod
        more = json.dumps({"spec": {"strategy": {"rollingUpdate": {"maxSurge": 1}}}})
        got = await as_tenant(s, "-n", ns, "patch", "deployment", "db", "-p", more)
        assert got.returncode != 0
        assert "exceeded quota: team, requested: pods=1, used: pods=3, limited: pods=3" in (
            got.stderr
        )
    print(f"members ran at most {seen.most} pods of pods=3 while web rolled")
    assert seen.most <= 3
    assert seen.most == 3, "the surge pod was never seen beside the old one: nothing was tested"


PERMANENT_ID = "resourcebinding.karmada.io/permanent-id"
WORKS = "/apis/work.karmada.io/v1alpha1/works"


async def test_a_tenant_cannot_relabel_its_binding_to_orphan_its_works(
    stack: Stack, ns: str
) -> None:
    """Issue 34: the tenant labelled its binding with a new `permanent-id`, deleted the
    Deployment and created another; Karmada finds a binding's Works only by that label, so the
    old Work was orphaned and kept running (4 pods under pods=2). Now the relabel — and any
    other change of the binding's metadata: a finalizer removed, a label or annotation added —
    is refused by name, the rest of the attack runs the new Deployment's 2 pods in place of the
    old ones, no Work of the old binding is left, and the members never run more than 2 pods,
    terminating ones counted, at any poll. Karmada's own deletion of the old binding (its
    finalizer, the garbage collector: metadata writes the webhook now sees) goes through."""
    s = stack
    members = list(s.members)
    await quota(s, ns, pods="2")
    web = deployment(ns, "web", 2, CPU)
    async with members_within(s, ns, 2) as w:
        await tenant_apply(s, web, divided_policy(ns, "web", members, "web"))
        rb = await placed(s, ns, "web", 2)
        name, meta = rb["metadata"]["name"], rb["metadata"]
        assert meta["labels"].get(PERMANENT_ID) and meta.get("finalizers"), meta
        attempts: dict[str, tuple[str, ...]] = {
            f"metadata.labels[{PERMANENT_ID}]": (
                "label",
                "--overwrite",
                "rb",
                name,
                f"{PERMANENT_ID}=00000000-0000-0000-0000-000000000001",
            ),
            "metadata.finalizers": (
                "patch",
                "rb",
                name,
                "--type",
                "merge",
                "-p",
                json.dumps({"metadata": {"finalizers": None}}),
            ),
            "metadata.labels[team]": ("label", "rb", name, "team=a"),
            "metadata.annotations[note]": ("annotate", "rb", name, "note=x"),
        }
        for named, args in attempts.items():
            got = await as_tenant(s, "-n", ns, *args)
            assert got.returncode != 0, f"{named}: {got.stdout}"
            assert f'user "{TENANT}" may not change {named} of a ResourceBinding' in got.stderr, (
                got.stderr
            )
        after = (await s.api.get(BINDINGS.format(ns=ns) + f"/{name}"))["metadata"]
        assert after["labels"] == meta["labels"] and after["finalizers"] == meta["finalizers"]
        assert not (after.get("annotations") or {}).get("note")
        old_id = meta["labels"][PERMANENT_ID]

        # the rest of the attack: the Deployment deleted and created again at once
        got = await as_tenant(s, "-n", ns, "delete", "deployment", "web", "--wait=false")
        assert got.returncode == 0, got.stderr
        await tenant_apply(s, web)
        uid = (await s.api.get(f"/apis/apps/v1/namespaces/{ns}/deployments/web"))["metadata"]["uid"]

        async def replaced() -> bool:
            try:
                now = await s.api.get(BINDINGS.format(ns=ns) + f"/{name}")
            except NotFound:
                return False
            owners = {o.get("uid") for o in now["metadata"].get("ownerReferences") or []}
            left = await s.api.get(WORKS, params={"labelSelector": f"{PERMANENT_ID}={old_id}"})
            pods = await running(s, ns, terminating=True)
            return (
                uid in owners
                and now["metadata"]["labels"].get(PERMANENT_ID) != old_id
                and not left.get("items")
                and sum(pods.values()) == 2
                and sum((await running(s, ns)).values()) == 2
            )

        # Karmada's detector re-creates the binding once the old one is gone, after its backoff
        # (seen at 2 s and at 40 s)
        await eventually(
            replaced, 120, "a new binding running 2 pods, no Work of the old one", interval=0.2
        )
    print(f"members ran at most {w.most} pods (terminating counted) over {w.polls} polls")


async def test_a_quota_on_count_pods_counts_the_pods(stack: Stack, ns: str) -> None:
    """Issue 34: a quota on `count/pods` (accepted by validation, as Kubernetes does) was
    charged nothing and 5 pods ran under count/pods=2. Kubernetes counts it as `pods`: the
    5-replica Deployment is refused naming count/pods, nothing of it runs, and scaled to 2 it
    runs and is counted; the members never run more than 2 pods, terminating ones counted, at
    any poll."""
    s = stack
    members = list(s.members)
    await quota(s, ns, **{"count/pods": "2"})
    async with members_within(s, ns, 2) as w:
        await tenant_apply(s, deployment(ns, "web", 5, CPU), divided_policy(ns, "web", members))

        async def refused() -> bool:
            events = await s.api.get(f"/api/v1/namespaces/{ns}/events")
            return "exceeded quota: team, requested: count/pods=5," in events_about(events, "web")

        await eventually(refused, 60, "the 5 pods refused, in the template's events", interval=0.2)
        with pytest.raises(NotFound):
            await s.api.get(BINDINGS.format(ns=ns) + "/web-deployment")
        got = await as_tenant(s, "-n", ns, "scale", "deployment", "web", "--replicas=2")
        assert got.returncode == 0, got.stderr

        async def counted() -> bool:
            q = await s.api.get(QUOTAS.format(ns=ns) + "/team")
            status = q.get("status") or {}
            return (
                (status.get("used") or {}).get("count/pods") == "2"
                and not status.get("pending")
                and sum((await running(s, ns)).values()) == 2
            )

        await eventually(counted, 90, "2 pods admitted, counted and running", interval=0.2)
    print(f"members ran at most {w.most} pods (terminating counted) over {w.polls} polls")


def lingering(ns: str, name: str, replicas: int, seconds: int) -> JSON:
    """A Deployment whose pods stay `seconds` in their termination grace period once deleted
    (the bed's kwok stage: e2e/testbed/cluster.py LINGER_ANNOTATION)."""
    d = deployment(ns, name, replicas, CPU)
    d["spec"]["template"]["metadata"]["annotations"] = {LINGER_ANNOTATION: f"{seconds}s"}
    return d


async def test_pods_in_their_grace_period_hold_the_quota_until_they_are_gone(
    stack: Stack, ns: str
) -> None:
    """Issue 34: the charge of a deleted workload was released with its binding while its pods
    still ran out their termination grace period in the members, so a new workload started
    beside them (Kubernetes counts a pod until its grace ends). As the tenant: 2 pods that
    take 8 s to stop are deleted and 2 new ones asked for at once; the members never run more
    than 2 pods (terminating ones counted) at any poll, and the new ones start once the old are
    gone."""
    s = stack
    members = list(s.members)
    await quota(s, ns, pods="2")
    async with members_within(s, ns, 2) as w:
        await tenant_apply(s, lingering(ns, "old", 2, 8), divided_policy(ns, "old", members))
        await placed(s, ns, "old", 2)
        got = await as_tenant(s, "-n", ns, "delete", "deployment", "old", "--wait=false")
        assert got.returncode == 0, got.stderr

        async def terminating() -> bool:
            pods = [p for ps in (await member_pods(s, ns)).values() for p in ps]
            return len(pods) == 2 and all(p["metadata"].get("deletionTimestamp") for p in pods)

        await eventually(terminating, 30, "the old pods in their grace period", interval=0.05)
        deleted_at = time.monotonic()
        await tenant_apply(s, deployment(ns, "new", 2, CPU), divided_policy(ns, "new", members))

        async def replaced() -> bool:
            pods = [p for ps in (await member_pods(s, ns)).values() for p in ps]
            names = {p["metadata"]["name"].rsplit("-", 2)[0] for p in pods}
            return len(pods) == 2 and names == {"new"}

        await eventually(replaced, 90, "the new pods running once the old are gone", 0.1)
        took = time.monotonic() - deleted_at
    assert took >= 5, f"the new pods ran {took:.1f} s after the old began to stop (grace 8 s)"
    print(f"members ran at most {w.most} pods (terminating counted); new ones after {took:.1f} s")


# ---------------------------------------------------------------------------------------------
# Issue 42: what the members run, not what Karmada intends. With member guards on by default, a
# rollout or a move under a full quota waits for the old pods, as Kubernetes makes it wait, and a
# StatefulSet's claims are charged. Each is judged by what the members hold at every poll.


def rolled(d: JSON, image: str) -> JSON:
    """`d` with its pods' image changed, rolled all at once: no surge pod, every old pod stopped
    together (maxUnavailable 100 %) — the new pods are what tries to pass the hard."""
    out = json.loads(json.dumps(d))
    out["spec"]["strategy"] = {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "100%"}}
    out["spec"]["template"]["spec"]["containers"][0]["image"] = image
    return out


async def images(s: Stack, ns: str) -> dict[str, int]:
    """The pods each image runs in the members, not counting those being deleted."""
    out: dict[str, int] = {}
    for pods in (await member_pods(s, ns)).values():
        for p in pods:
            if not p["metadata"].get("deletionTimestamp"):
                image = p["spec"]["containers"][0]["image"]
                out[image] = out.get(image, 0) + 1
    return out


async def test_a_rollout_under_a_full_quota_waits_for_the_old_pods(stack: Stack, ns: str) -> None:
    """Issue 42: the tenant changed a Deployment's image three times (maxSurge 0, maxUnavailable
    100 %) while the old pods were in their 6 s grace period, and member1 ran 16 pods under
    pods=4. With the guards on by default (the quota says nothing of them), each rollout's new
    pods wait in the member until the old are gone: ≤ 4 pods, terminating ones counted, at
    every poll, and the last image runs 4 pods in the end."""
    s = stack
    first = sorted(s.members)[0]
    await quota(s, ns, pods="4")
    base = rolled(lingering(ns, "web", 4, 6), "nginx:1")
    async with members_within(s, ns, 4) as w:
        await tenant_apply(s, base, divided_policy(ns, "web", [first]))
        await placed(s, ns, "web", 4)
        for tag in ("2", "3", "4"):
            await tenant_apply(s, rolled(base, f"nginx:{tag}"))
            await asyncio.sleep(0.5)  # the tenant's pace between edits, not synchronisation

        async def rolled_out() -> bool:
            return await images(s, ns) == {"nginx:4": 4}

        await eventually(rolled_out, 120, "the last image's 4 pods running", interval=0.2)
    assert w.most == 4, w.seen
    print(f"members ran at most {w.most} pods (terminating counted) over {w.polls} polls")


async def test_a_move_under_a_full_quota_waits_for_the_old_pods(stack: Stack, ns: str) -> None:
    """Issue 42: the tenant edited the PropagationPolicy to move a workload from member1 to
    member2 while its pods stopped slowly, and 8 pods ran under pods=4 (4 terminating in
    member1, 4 new in member2). member2's guard now gets only what member1's pods leave."""
    s = stack
    one, two = sorted(s.members)[:2]
    await quota(s, ns, pods="4")
    async with members_within(s, ns, 4) as w:
        await tenant_apply(s, lingering(ns, "web", 4, 8), divided_policy(ns, "web", [one]))
        await placed(s, ns, "web", 4)
        await tenant_apply(s, divided_policy(ns, "web", [two]))

        async def moved() -> bool:
            return await running(s, ns) == {m: 4 if m == two else 0 for m in s.members}

        await eventually(moved, 120, f"the 4 pods running in {two} alone", interval=0.2)
    assert w.most == 4, w.seen
    print(f"members ran at most {w.most} pods (terminating counted) over {w.polls} polls")


def stateful_set(ns: str, name: str, replicas: int, claim: str) -> JSON:
    """A StatefulSet with one claim template of `claim` storage."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "app", "image": "nginx", "resources": {"requests": dict(CPU)}}
                    ]
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": claim}},
                    },
                }
            ],
        },
    }


def stateful_policy(ns: str, name: str, clusters: list[str]) -> JSON:
    policy = divided_policy(ns, name, clusters)
    policy["spec"]["resourceSelectors"] = [
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name}
    ]
    return policy


async def test_a_statefulsets_claims_are_charged(stack: Stack, ns: str) -> None:
    """Issue 42: a StatefulSet of 3 replicas with one claim template made 3 claims in the
    members under persistentvolumeclaims=1, charged 0. As the tenant: that StatefulSet is
    refused, the members never hold more than 1 claim of the namespace at any poll, and one of
    1 replica is admitted and makes its one claim."""
    s = stack
    members = sorted(s.members)
    await quota(s, ns, persistentvolumeclaims="1", pods="10")
    claims_path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims"

    async def claims() -> tuple[int, dict[str, int]]:
        now = {m: len(items) for m, items in (await member_items(s, claims_path)).items()}
        return sum(now.values()), now

    async with within(claims, 1, "persistentvolumeclaims") as w:
        await tenant_apply(s, stateful_set(ns, "db", 3, "1Gi"), stateful_policy(ns, "db", members))

        async def refused() -> bool:
            events = await s.api.get(f"/api/v1/namespaces/{ns}/events")
            return any(
                "exceeded quota: team" in (e.get("message") or "")
                and "persistentvolumeclaims=3" in (e.get("message") or "")
                for e in events.get("items", [])
            )

        await eventually(refused, 60, "the 3-claim StatefulSet refused", interval=0.2)
        got = await as_tenant(s, "-n", ns, "delete", "statefulset", "db", "--wait=false")
        assert got.returncode == 0, got.stderr
        await settled(s, ns)
        await tenant_apply(
            s, stateful_set(ns, "one", 1, "1Gi"), stateful_policy(ns, "one", members)
        )

        async def one_claim() -> bool:
            return (await claims())[0] == 1

        await eventually(one_claim, 90, "the 1-replica StatefulSet's claim", interval=0.2)

        async def charged() -> bool:
            q = await s.api.get(QUOTAS.format(ns=ns) + "/team")
            return (q.get("status") or {}).get("used", {}).get("persistentvolumeclaims") == "1"

        await eventually(charged, 30, "its claim in status.used", interval=0.1)
    print(f"members held at most {w.most} claims over {w.polls} polls")


async def test_a_scaled_down_statefulsets_retained_claim_holds_the_quota_until_deleted(
    stack: Stack, ns: str
) -> None:
    """Issue 42's leftover: a StatefulSet scaled down keeps the claims of its removed replicas
    in the member (`persistentVolumeClaimRetentionPolicy.whenScaled: Retain`, the default), and
    Kubernetes' quota — the member's guard — counts them, but `status.used` dropped with the
    binding's charge, so admission let in a claim the members then held past the quota. As the
    tenant: a StatefulSet of 2 replicas with one claim template, under persistentvolumeclaims=2,
    is scaled to 1; the retained claim stays in status.used (read from the API server, never
    below what the members hold, at every poll), a second StatefulSet asking for 1 claim is
    refused while it exists, and once the retained claim is deleted in the member it is let in.
    The members never hold more than 2 claims of the namespace."""
    s = stack
    one = sorted(s.members)[0]
    await quota(s, ns, persistentvolumeclaims="2", pods="10")
    claims_path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims"

    async def held() -> dict[str, list[str]]:
        """The claims each member holds (what Kubernetes' quota there counts)."""
        return {
            m: sorted(c["metadata"]["name"] for c in items)
            for m, items in (await member_items(s, claims_path)).items()
        }

    async def claims() -> tuple[int, dict[str, list[str]]]:
        now = await held()
        return sum(len(v) for v in now.values()), now

    async def status() -> JSON:
        return (await s.api.get(QUOTAS.format(ns=ns) + "/team")).get("status") or {}

    async def counted() -> int:
        return int((await status()).get("used", {}).get("persistentvolumeclaims", "-1"))

    # the bed's members bind no volume (no provisioner): a pod with a claim stays Pending, so
    # the StatefulSet makes its replicas in parallel (OrderedReady would wait for db-0 Ready)
    db = stateful_set(ns, "db", 2, "1Gi")
    db["spec"]["podManagementPolicy"] = "Parallel"
    async with within(claims, 2, "persistentvolumeclaims") as w:
        await tenant_apply(s, db, stateful_policy(ns, "db", [one]))

        async def both_claims() -> bool:
            return (await held())[one] == ["data-db-0", "data-db-1"]

        await eventually(both_claims, 90, f"db's 2 claims in {one}", interval=0.2)

        async def observed_two() -> JSON | None:
            q = await status()
            by = {c["clusterName"]: c for c in q.get("aggregatedStatus", [])}
            held_two = ((by.get(one) or {}).get("observed") or {}).get("persistentvolumeclaims")
            return q if held_two == "2" else None

        # each live replica's claim is charged and held: counted once (2, not 4)
        q = await eventually(observed_two, 30, "the 2 claims observed", interval=0.1)
        assert q["used"]["persistentvolumeclaims"] == "2", q["used"]
        got = await as_tenant(s, "-n", ns, "scale", "statefulset", "db", "--replicas=1")
        assert got.returncode == 0, got.stderr

        async def scaled_down() -> bool:
            rb = await s.api.get(BINDINGS.format(ns=ns) + "/db-statefulset")
            placed_there = sum(c.get("replicas", 0) for c in rb["spec"].get("clusters", []))
            pods = (await running(s, ns, terminating=True))[one]
            return placed_there == 1 and pods == 1

        await eventually(scaled_down, 90, "db scaled to 1 replica in the member", interval=0.2)
        assert (await held())[one] == ["data-db-0", "data-db-1"], "the claim is retained"

        # the retained claim stays counted: used is never below what the members hold
        async def used_covers_what_the_members_hold() -> tuple[int, dict[str, list[str]]]:
            used = await counted()
            total, now = await claims()
            if used < total:
                raise InvariantViolation(f"status.used persistentvolumeclaims={used} < {now}")
            return used, now

        async with within(used_covers_what_the_members_hold, 2, "used claims"):

            async def recomputed() -> JSON | None:
                """The status once it shows the scale-down: 1 claim placed, 2 held."""
                q = await status()
                by = {c["clusterName"]: c for c in q.get("aggregatedStatus", [])}
                there = by.get(one) or {}
                placed_one = (there.get("used") or {}).get("persistentvolumeclaims") == "1"
                held_two = (there.get("observed") or {}).get("persistentvolumeclaims") == "2"
                return q if placed_one and held_two else None

            q = await eventually(recomputed, 30, "the status showing the scale-down", interval=0.1)
            assert q["used"]["persistentvolumeclaims"] == "2", q["used"]

            # a competitor asking for 1 claim is refused while the retained claim exists
            await tenant_apply(
                s, stateful_set(ns, "other", 1, "1Gi"), stateful_policy(ns, "other", [one])
            )

            async def refused() -> bool:
                events = await s.api.get(f"/api/v1/namespaces/{ns}/events")
                return any(
                    "exceeded quota: team, requested: persistentvolumeclaims=1, "
                    "used: persistentvolumeclaims=2" in (e.get("message") or "")
                    for e in events.get("items", [])
                )

            await eventually(refused, 60, "the competing StatefulSet refused", interval=0.2)
            assert (await held())[one] == ["data-db-0", "data-db-1"]
            assert await counted() == 2

        # the retained claim deleted in the member: released, and the competitor let in. The
        # member's API server puts the kubernetes.io/pvc-protection finalizer on every claim and
        # the bed runs no controller that takes it off (the member's pvc-protection controller
        # does, once no pod uses the claim): the test takes it off, and until then the claim
        # being deleted still counts, as Kubernetes' quota counts it
        member = s.members[one]
        await member.request("DELETE", f"{claims_path}/data-db-1")
        with contextlib.suppress(NotFound):
            await member.merge_patch(f"{claims_path}/data-db-1", {"metadata": {"finalizers": None}})

        async def competitor_in() -> bool:
            return (await held())[one] == ["data-db-0", "data-other-0"]

        await eventually(competitor_in, 120, "the competitor's claim once room was made")

        async def charged_two() -> bool:
            return await counted() == 2

        await eventually(charged_two, 30, "status.used back at the 2 claims held", interval=0.1)
    print(f"members held at most {w.most} claims over {w.polls} polls")


async def priority_classes(s: Stack, *names: str) -> None:
    """PriorityClasses on karmada-apiserver and in every member (their pods name them)."""
    for name in names:
        pc = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": 1000,
        }
        for cluster in (KARMADA, *s.members):
            await s.bed.aapply(pc, cluster=cluster)


async def scoped_quota(s: Stack, ns: str, name: str, pods: str, priority: str) -> None:
    """Quota `name` of `pods` pods of class `priority`, admission alone (memberEnforcement
    None: no member guard holds it, the template gate must), enforced and its usage known."""
    in_class = {"scopeName": "PriorityClass", "operator": "In", "values": [priority]}
    await s.bed.aapply(
        product.quota(
            ns,
            name,
            {"pods": pods},
            memberEnforcement="None",
            scopeSelector={"matchExpressions": [in_class]},
        )
    )

    async def enforced() -> bool:
        q = await s.api.get(QUOTAS.format(ns=ns) + f"/{name}")
        status = q.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions", [])}
        return conditions.get("Enforced", {}).get("status") == "True" and "pods" in (
            status.get("used") or {}
        )

    await eventually(enforced, 30, f"quota {name} enforced and its usage known", interval=0.05)


async def test_a_template_cannot_move_its_pods_into_a_full_priority_class(
    stack: Stack, ns: str
) -> None:
    """Issue 42: the tenant edits a Deployment of class low to class high. Karmada renders the
    template as it is now into every member on its next sync, whatever admission says of the
    binding's update, so the edit is charged at the template against quota high — full — and
    refused in Kubernetes' words. The members never run more pods of class high than its hard
    (1), at any poll, even once Karmada renders the binding again."""
    s = stack
    members = list(s.members)
    token = secrets.token_hex(3)
    low, high = f"e2e-low-{token}", f"e2e-high-{token}"
    await priority_classes(s, low, high)
    try:
        await scoped_quota(s, ns, "low", "10", low)
        await scoped_quota(s, ns, "high", "1", high)

        async def high_pods() -> tuple[int, dict[str, int]]:
            per = {
                m: sum(1 for p in pods if p["spec"].get("priorityClassName") == high)
                for m, pods in (await member_pods(s, ns)).items()
            }
            return sum(per.values()), per

        async with within(high_pods, 1, f"pods of class {high}") as w:
            await tenant_apply(
                s,
                deployment(ns, "busy", 1, CPU, priorityClassName=high),
                divided_policy(ns, "busy", members, "busy"),
            )
            await placed(s, ns, "busy", 1)  # quota high is full
            await tenant_apply(
                s,
                deployment(ns, "web", 2, CPU, priorityClassName=low),
                divided_policy(ns, "web", members, "web"),
            )
            rb = await placed(s, ns, "web", 3)

            async def counted() -> bool:
                for name in ("low", "high"):
                    q = await s.api.get(QUOTAS.format(ns=ns) + f"/{name}")
                    if (q.get("status") or {}).get("pending"):
                        return False
                return True

            await eventually(counted, 30, "no pending charge left", interval=0.05)
            patch = json.dumps({"spec": {"template": {"spec": {"priorityClassName": high}}}})
            got = await as_tenant(s, "-n", ns, "patch", "deployment", "web", "-p", patch)
            assert got.returncode != 0, "the move into a full priority class was admitted"
            assert "exceeded quota: high, requested: pods=2, used: pods=1, limited: pods=1" in (
                got.stderr
            ), got.stderr
            # a harmless override makes Karmada render the binding again: its members still
            # run class low (the refused edit reached no member)
            await tenant_apply(s, label_override(ns))
            clusters = [c["name"] for c in rb["spec"]["clusters"]]
            for d in (await rendered_again(s, ns, "web", clusters)).values():
                assert d["spec"]["template"]["spec"]["priorityClassName"] == low, d["spec"]
            assert (await high_pods())[0] == 1
        q = await s.api.get(QUOTAS.format(ns=ns) + "/high")
        assert q["status"]["used"]["pods"] == "1"
        print(f"members ran at most {w.most} pods of class {high} over {w.polls} polls")
    finally:
        for cluster in (KARMADA, *s.members):
            for name in (low, high):
                await s.bed.akubectl(
                    "delete", "priorityclass", name, "--ignore-not-found", cluster=cluster
                )
