"""The webhook tests' view of the shared builder: bindings named as given, one cpu each."""

from __future__ import annotations

from typing import Any

from karmadaquota.api import ResourceBinding
from karmadaquota.kube.client import JSON
from tests import conftest


def binding_doc(
    name: str,
    replicas: int = 1,
    cpu: str | None = "1",
    namespace: str = "ns",
    uid: str | None = None,
    generation: int = 1,
    clusters: list[tuple[str, int]] | None = None,
) -> JSON:
    """conftest.binding_doc: the object named `name` (uid-<name>), requesting `cpu` per replica."""
    return conftest.binding_doc(
        replicas,
        {"cpu": cpu} if cpu is not None else {},
        name=name,
        object_name=name,
        namespace=namespace,
        uid=uid or f"uid-{name}",
        generation=generation,
        clusters=dict(clusters or []),
    )


def binding(name: str, **kw: Any) -> ResourceBinding:
    return ResourceBinding.model_validate(binding_doc(name, **kw))
