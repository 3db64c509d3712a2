"""The test bed itself, end to end: the path every KarmadaQuota e2e test relies on.

1. A Deployment + PropagationPolicy on karmada-apiserver become a scheduled ResourceBinding
   carrying replicaRequirements (resourceRequest and, with the ResourceQuotaEstimate gate,
   priorityClassName); the Deployment lands in both members and its pods run (kwok).
2. The KarmadaQuota CRD installs into karmada-apiserver and ``kubectl get karmadaquotas`` works.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from e2e.testbed.workloads import deployment, divided_policy

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
CRD_DOC = yaml.safe_load(product.CRD.read_text())
REPLICAS = 4
REQUESTS = {"cpu": "100m", "memory": "128Mi"}


def priority_class(name: str, clusters: list[str]) -> list[dict[str, Any]]:
    """A PriorityClass on karmada-apiserver, propagated to ``clusters`` (pods there need it)."""
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": 1000,
        },
        {
            "apiVersion": "policy.karmada.io/v1alpha1",
            "kind": "ClusterPropagationPolicy",
            "metadata": {"name": name},
            "spec": {
                "resourceSelectors": [
                    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "name": name}
                ],
                "placement": {"clusterAffinity": {"clusterNames": clusters}},
            },
        },
    ]


async def test_deployment_reaches_members_with_replica_requirements(
    testbed: TestBed, namespace: str
) -> None:
    assert len(testbed.members) >= 2, "this test needs two member clusters"
    clusters = testbed.members[:2]
    pc = f"e2e-high-{secrets.token_hex(3)}"
    name = "web"
    await testbed.aapply(priority_class(pc, clusters))
    try:
        await testbed.aapply(
            [
                deployment(namespace, name, REPLICAS, REQUESTS, priorityClassName=pc),
                divided_policy(namespace, name, clusters, name),
            ]
        )

        async def binding_scheduled() -> dict[str, Any] | None:
            rb = await testbed.aget("resourcebindings", f"{name}-deployment", namespace=namespace)
            spec = (rb or {}).get("spec", {})
            placed = {c["name"]: c.get("replicas", 0) for c in spec.get("clusters") or []}
            return rb if sum(placed.values()) == REPLICAS else None

        rb = await eventually(binding_scheduled, 60, "the ResourceBinding to be scheduled")
        spec = rb["spec"]
        req = spec["replicaRequirements"]
        assert req["resourceRequest"] == REQUESTS
        assert req.get("priorityClassName") == pc, "is ResourceQuotaEstimate enabled?"
        assert spec["replicas"] == REPLICAS
        placed = {c["name"]: c["replicas"] for c in spec["clusters"]}
        assert set(placed) == set(clusters), placed

        for cluster in clusters:

            async def pods_running(cluster: str = cluster) -> list[dict[str, Any]] | None:
                pods = await testbed.aget("pods", cluster=cluster, namespace=namespace)
                items = (pods or {}).get("items", [])
                running = [p for p in items if p.get("status", {}).get("phase") == "Running"]
                return running if len(running) == placed[cluster] else None

            running = await eventually(
                pods_running, 90, f"{placed[cluster]} Running pods in {cluster}/{namespace}"
            )
            for pod in running:
                assert pod["spec"]["priorityClassName"] == pc
                assert pod["spec"]["priority"] == 1000
                assert pod["spec"]["containers"][0]["resources"]["requests"] == REQUESTS
                assert pod["spec"]["nodeName"].startswith(f"{cluster}-node-")
            dep = await testbed.aget("deployments", name, cluster=cluster, namespace=namespace)
            assert dep is not None and dep["spec"]["replicas"] == placed[cluster]
    finally:
        await testbed.akubectl(
            "delete", "clusterpropagationpolicy", pc, "--ignore-not-found", "--wait=false"
        )
        await testbed.akubectl("delete", "priorityclass", pc, "--ignore-not-found", "--wait=false")


async def test_karmadaquota_crd_installs_and_lists(testbed: TestBed, namespace: str) -> None:
    crd = CRD_DOC
    await testbed.aapply(crd)
    await testbed.akubectl(
        "wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}", "--timeout=60s"
    )
    empty = await testbed.akubectl("get", "karmadaquotas", "-n", namespace)
    assert "No resources found" in empty.stdout + empty.stderr

    quota = {
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuota",
        "metadata": {"name": "team", "namespace": namespace},
        "spec": {"hard": {"requests.cpu": "10", "pods": "20"}},
    }
    await testbed.aapply(quota)
    listed = await testbed.akubectl("get", "karmadaquotas", "-n", namespace, "-o", "name")
    assert listed.stdout.split() == ["karmadaquota.quota.karmada.io/team"]
    table = await testbed.akubectl("get", "kq", "-n", namespace)
    assert "team" in table.stdout


SAMPLES = {p.name: yaml.safe_load(p.read_text()) for p in (REPO / "api" / "samples").glob("*.yaml")}
BE = {"scopeName": "BestEffort", "operator": "Exists"}
NBE = {"scopeName": "NotBestEffort", "operator": "Exists"}


@pytest.mark.parametrize("sample", sorted(SAMPLES))
async def test_every_sample_is_accepted_by_a_real_api_server(
    testbed: TestBed, namespace: str, sample: str
) -> None:
    await testbed.aapply(CRD_DOC)
    doc = {**SAMPLES[sample], "metadata": {**SAMPLES[sample]["metadata"], "namespace": namespace}}
    await testbed.aapply(doc)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"hard": {"limits.pods": "1"}}, "limits may be limits.cpu, limits.memory or"),
        ({"hard": {"requests.cpu": "12x"}}, "should match"),
        (
            {"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": [BE, NBE]}},
            "conflicting scopes: BestEffort and NotBestEffort",
        ),
        ({"hard": {"cpu": "1"}, "scopes": ["BestEffort"]}, "may track only pods"),
        (
            {
                "hard": {"pods": "1"},
                "scopeSelector": {
                    "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In"}]
                },
            },
            "must be at least one value",
        ),
        (
            {
                "hard": {"pods": "1"},
                "scopeSelector": {
                    "matchExpressions": [
                        {"scopeName": "PriorityClass", "operator": "Exists", "values": ["x"]}
                    ]
                },
            },
            "must be no value",
        ),
        (
            {
                "hard": {"pods": "1"},
                "scopeSelector": {
                    "matchExpressions": [
                        {"scopeName": "BestEffort", "operator": "In", "values": ["x"]}
                    ]
                },
            },
            "must be 'Exists'",
        ),
        (
            {
                "hard": {"pods": "1"},
                "scopeSelector": {
                    "matchExpressions": [{"scopeName": "Color", "operator": "Exists"}]
                },
            },
            'Unsupported value: "Color"',
        ),
        (
            {"hard": {"services": "1"}, "scopes": ["NotBestEffort"]},
            "a scoped quota may track only pods",
        ),
    ],
)
async def test_the_crd_schema_and_cel_rules_reject_invalid_quotas(
    testbed: TestBed, namespace: str, spec: dict[str, Any], message: str
) -> None:
    """No webhook involved: what the API server itself refuses from the generated CRD."""
    await testbed.aapply(CRD_DOC)
    doc = {
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuota",
        "metadata": {"name": "bad", "namespace": namespace},
        "spec": spec,
    }
    proc = await testbed.akubectl("create", "-f", "-", input=json.dumps(doc), check=False)
    assert proc.returncode != 0, "the API server accepted an invalid KarmadaQuota"
    assert message in proc.stderr
