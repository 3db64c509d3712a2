"""Migration from FederatedResourceQuota: `kubectl karmadaquota import-frq` on the real bed.

FRQs are created on karmada-apiserver (the bed installs Karmada's own CRDs, FRQ's among them;
its enforcement gate is off, so only what we import enforces anything), the plugin's output is
applied as a user would pipe it into `kubectl apply -f -`, and bindings over the imported
limits are refused by our webhook while bindings within them are admitted.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from e2e.testbed import TestBed, product
from e2e.testbed.aio import eventually
from karmadaquota.kube.client import KubeClient, KubeError

pytestmark = pytest.mark.e2e

RB_PATH = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings"


@pytest.fixture(scope="module")
async def enforcing(testbed: TestBed) -> AsyncIterator[KubeClient]:
    """CRD + controller + webhook registered for the module; a client for karmada-apiserver."""
    await asyncio.to_thread(product.install_crd, testbed)
    controller, _ = product.start_controller(testbed, "controller-migration")
    hook = await product.start_webhook(testbed, "webhook-migration")
    client = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    try:
        await asyncio.to_thread(product.register, testbed, hook.base, hook.ca_bundle)
        yield client
    finally:
        await client.close()
        await asyncio.to_thread(product.unregister, testbed)
        hook.proc.stop()
        controller.stop()


def frq(namespace: str, name: str, overall: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "FederatedResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"overall": overall, **spec},
    }


def rb(namespace: str, name: str, request: dict[str, str], replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "replicas": replicas,
            "replicaRequirements": {"resourceRequest": request},
        },
    }


def import_frq(bed: TestBed, namespace: str) -> str:
    """The plugin as a user runs it (`kubectl karmadaquota import-frq -n NS`), with the bed's
    kubectl and the interpreter running the tests."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "karmadaquota.kubectl_plugin",
            "import-frq",
            "-n",
            namespace,
            f"--kubeconfig={bed.karmada_kubeconfig}",
        ],
        env={**os.environ, "KUBECTL": bed.kubectl_binary},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


async def test_imported_frqs_enforce_the_same_limits(
    testbed: TestBed, enforcing: KubeClient, namespace: str
) -> None:
    crd = testbed.get("crd", "federatedresourcequotas.policy.karmada.io")
    assert crd, "the bed installs Karmada's FederatedResourceQuota CRD"
    ns1, ns2 = namespace, f"{namespace[:50]}-b{secrets.token_hex(2)}"
    await testbed.akubectl("create", "namespace", ns2)
    try:
        await testbed.aapply(
            [
                frq(ns1, "compute", {"cpu": "1", "pods": "3"}),
                frq(
                    ns1,
                    "gpus",
                    {"nvidia.com/gpu": "2", "limits.cpu": "8"},
                    staticAssignments=[
                        {"clusterName": m, "hard": {"nvidia.com/gpu": "1"}} for m in testbed.members
                    ],
                ),
                frq(ns2, "memory", {"memory": "1Gi"}),
            ]
        )
        out = import_frq(testbed, ns1) + "---\n" + import_frq(testbed, ns2)
        docs = [d for d in yaml.safe_load_all(out) if d]
        assert {
            (d["metadata"]["namespace"], d["metadata"]["name"]): d["spec"]["hard"] for d in docs
        } == {
            (ns1, "compute"): {"requests.cpu": "1", "pods": "3"},
            (ns1, "gpus"): {"requests.nvidia.com/gpu": "2"},
            (ns2, "memory"): {"requests.memory": "1Gi"},
        }
        assert "not carried over: limits.cpu=8" in out
        assert "staticAssignments (" in out
        applied = await testbed.akubectl("apply", "-f", "-", input=out)
        assert applied.stdout.count("created") == 3, applied.stdout

        def ready(ns: str, name: str, names: set[str]) -> bool:
            q = testbed.get("karmadaquota", name, namespace=ns) or {}
            return names <= set(q.get("status", {}).get("used", {}))

        for ns, name, names in [
            (ns1, "compute", {"requests.cpu", "pods"}),
            (ns1, "gpus", {"requests.nvidia.com/gpu"}),
            (ns2, "memory", {"requests.memory"}),
        ]:
            initialised = functools.partial(ready, ns, name, names)
            await eventually(initialised, 60, f"{ns}/{name} initialised")

        async def admitted(ns: str, name: str, request: dict[str, str], replicas: int = 1) -> None:
            await enforcing.post(RB_PATH.format(ns=ns), rb(ns, name, request, replicas))

        async def refused(ns: str, name: str, request: dict[str, str], denial: str) -> None:
            with pytest.raises(KubeError, match=re.escape(denial)):
                await admitted(ns, name, request)

        # compute: cpu 1, pods 3; gpus: nvidia.com/gpu 2; memory: 1Gi in the other namespace
        await admitted(ns1, "a", {"cpu": "600m"})
        await refused(
            ns1, "b", {"cpu": "600m"}, "exceeded quota: compute, requested: requests.cpu=600m"
        )
        gpus = {"cpu": "1m", "nvidia.com/gpu": "3"}
        await refused(ns1, "g", gpus, "exceeded quota: gpus, requested: requests.nvidia.com/gpu=3")
        await admitted(ns1, "g2", {"cpu": "1m", "nvidia.com/gpu": "2"})
        await admitted(ns1, "c", {"cpu": "100m"})
        await refused(ns1, "d", {"cpu": "1m"}, "exceeded quota: compute, requested: pods=1")
        await admitted(ns2, "m1", {"memory": "768Mi"})
        await refused(
            ns2,
            "m2",
            {"memory": "512Mi"},
            "exceeded quota: memory, requested: requests.memory=512Mi",
        )
    finally:
        await testbed.akubectl("delete", "namespace", ns2, "--ignore-not-found", "--wait=false")
