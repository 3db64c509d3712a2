"""The tenant of the e2e suites: a user holding exactly Kubernetes' `edit` plus the rules of
Karmada's `karmada-edit` ClusterRole in a namespace (issue 29), and a client that impersonates it.

Karmada's `artifacts/deploy/admin-clusterrole-aggregation.yaml` grants `karmada-edit` (aggregated
into edit and admin) create/update/patch/delete on propagationpolicies, overridepolicies,
resourcebindings(/status), works(/status) and the autoscaling kinds; the bed does not install
Karmada's aggregation roles, so the same rules are created here under a name of our own and
bound by name.
"""

from __future__ import annotations

from typing import Any

from e2e.testbed.bed import TestBed
from karmadaquota.kube.client import KubeClient

USER = "alice"
GROUPS = ("team-a",)
KARMADA_EDIT = "e2e-karmada-edit"
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
_AUTOSCALING = [
    "cronfederatedhpas",
    "cronfederatedhpas/status",
    "federatedhpas",
    "federatedhpas/status",
]
KARMADA_EDIT_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["autoscaling.karmada.io"],
        "resources": _AUTOSCALING,
        "verbs": _WRITE,
    },
    {
        "apiGroups": ["policy.karmada.io"],
        "resources": ["overridepolicies", "propagationpolicies"],
        "verbs": _WRITE,
    },
    {
        "apiGroups": ["work.karmada.io"],
        "resources": ["resourcebindings", "resourcebindings/status", "works", "works/status"],
        "verbs": _WRITE,
    },
    # karmada-view's read rules (aggregated into view, and so into edit)
    {
        "apiGroups": ["policy.karmada.io", "work.karmada.io"],
        "resources": ["overridepolicies", "propagationpolicies", "resourcebindings", "works"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["autoscaling.karmada.io"],
        "resources": _AUTOSCALING,
        "verbs": ["get", "list", "watch"],
    },
]


async def grant(bed: TestBed, namespace: str) -> None:
    """Bind the tenant to edit + karmada-edit in `namespace` (and create the role once)."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": KARMADA_EDIT},
        "rules": KARMADA_EDIT_RULES,
    }
    bindings = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{USER}-{name}", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        }
        for name in ("edit", KARMADA_EDIT)
    ]
    await bed.aapply([role, *bindings])


def impersonating(admin: KubeClient) -> KubeClient:
    """A client that acts as the tenant through `admin`'s credentials (Impersonate-User)."""
    headers = {**admin._auth, "Impersonate-User": USER}
    return KubeClient(admin.host, admin._ssl, headers, admin.credentials)
