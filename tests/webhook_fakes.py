"""Wire-shaped ResourceBindings for the webhook unit tests."""

from __future__ import annotations

from typing import Any

from karmadaquota.api import ResourceBinding
from karmadaquota.kube.client import JSON


def binding_doc(
    name: str,
    replicas: int = 1,
    cpu: str | None = "1",
    namespace: str = "ns",
    uid: str | None = None,
    generation: int = 1,
    clusters: list[tuple[str, int]] | None = None,
) -> JSON:
    req = {"cpu": cpu} if cpu is not None else {}
    return {
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "generation": generation,
        },
        "spec": {
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "replicas": replicas,
            "replicaRequirements": {"resourceRequest": req},
            "clusters": [{"name": c, "replicas": r} for c, r in (clusters or [])],
        },
    }


def binding(name: str, **kw: Any) -> ResourceBinding:
    return ResourceBinding.model_validate(binding_doc(name, **kw))
