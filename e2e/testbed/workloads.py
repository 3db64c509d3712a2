"""Workload manifests for the e2e suites, the benchmarks and `make up`: a Deployment with
requests, and a PropagationPolicy dividing replicas evenly over member clusters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def deployment(
    namespace: str,
    name: str,
    replicas: int,
    requests: Mapping[str, str],
    **pod_spec: Any,
) -> dict[str, Any]:
    """One-container Deployment; `pod_spec` adds fields such as priorityClassName. It rolls
    without a surge pod (maxSurge 0), so that it is charged its replicas alone: a test of
    surge charging sets its own strategy (karmadaquota.pod_template.surge)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    **pod_spec,
                    "containers": [
                        {"name": "app", "image": "nginx", "resources": {"requests": dict(requests)}}
                    ],
                },
            },
        },
    }


def divided_policy(
    namespace: str,
    name: str,
    clusters: Sequence[str],
    deployment: str | None = None,
    failover: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Divide `deployment` (every Deployment of the namespace when None) evenly, with static
    equal weights, over `clusters`; `failover`, the policy's failover behaviour."""
    selector: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "Deployment"}
    if deployment is not None:
        selector["name"] = deployment
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "resourceSelectors": [selector],
            # Karmada's webhook: application failover needs propagateDeps
            **({"failover": failover, "propagateDeps": True} if failover else {}),
            "placement": {
                "clusterAffinity": {"clusterNames": list(clusters)},
                "replicaScheduling": {
                    "replicaSchedulingType": "Divided",
                    "replicaDivisionPreference": "Weighted",
                    "weightPreference": {
                        "staticWeightList": [
                            {"targetCluster": {"clusterNames": [c]}, "weight": 1} for c in clusters
                        ]
                    },
                },
            },
        },
    }
