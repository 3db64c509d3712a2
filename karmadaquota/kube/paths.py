"""REST paths of the objects karmadaquota reads and writes."""

from __future__ import annotations

from karmadaquota import api


def quotas(namespace: str | None = None) -> str:
    """The KarmadaQuota collection, in one namespace or across all of them."""
    base = f"/apis/{api.GROUP}/{api.VERSION}"
    return f"{base}/namespaces/{namespace}/{api.PLURAL}" if namespace else f"{base}/{api.PLURAL}"


def quota(namespace: str, name: str) -> str:
    return f"{quotas(namespace)}/{name}"


def quota_status(namespace: str, name: str) -> str:
    return f"{quota(namespace, name)}/status"


def cluster_quotas() -> str:
    """The ClusterKarmadaQuota collection (cluster-scoped)."""
    return f"/apis/{api.GROUP}/{api.VERSION}/{api.CLUSTER_PLURAL}"


def cluster_quota(name: str) -> str:
    return f"{cluster_quotas()}/{name}"


def cluster_quota_status(name: str) -> str:
    return f"{cluster_quota(name)}/status"


def bindings(namespace: str | None = None) -> str:
    base = f"/apis/{api.BINDING_GROUP}/{api.BINDING_VERSION}"
    return (
        f"{base}/namespaces/{namespace}/{api.BINDING_PLURAL}"
        if namespace
        else f"{base}/{api.BINDING_PLURAL}"
    )
