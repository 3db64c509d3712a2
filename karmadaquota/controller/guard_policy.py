"""The admission policy that protects member guards in a member cluster (pure).

A guard is an ordinary ResourceQuota, so whoever may write ResourceQuotas in a member could
delete or raise it, and the member would admit pods past the global hard until the controller
put it back. Where the member serves `admissionregistration.k8s.io/v1`
ValidatingAdmissionPolicy (Kubernetes ≥ 1.30) the guard keeper installs one policy and its
binding that refuse, in the member's own API server, every CREATE, UPDATE and DELETE of a
ResourceQuota carrying the guard label by anyone but the identity the controller reaches that
member with (learnt with a SelfSubjectReview, or configured). The label is matched on the
object before and after the request (Kubernetes' objectSelector semantics for UPDATE), so
removing the label, planting a labelled "guard" and deleting one are all refused. Deletions
while the namespace itself is being deleted are let through: the namespace controller must be
able to empty a terminating namespace. Status writes (`resourcequotas/status`, the member's
quota controller) are a subresource the policy does not match.

Older members get watch-and-restore only (`supports_policy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karmadaquota.kube.client import JSON

GROUP_PATH = "/apis/admissionregistration.k8s.io/v1"
POLICY_NAME = "karmadaquota-guards"
POLICIES = f"{GROUP_PATH}/validatingadmissionpolicies"
BINDINGS = f"{GROUP_PATH}/validatingadmissionpolicybindings"
SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"

# the label every guard carries (controller.guard_keeper.GUARD_LABEL; repeated here so that
# this pure module does not import the I/O one)
GUARD_LABEL = "quota.karmada.io/guard-of"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "karmadaquota"


class IdentityError(ValueError):
    """An identity that cannot be written into the policy's expression."""


def supports_policy(discovery: Mapping[str, Any]) -> bool:
    """The member serves ValidatingAdmissionPolicy and its binding in
    admissionregistration.k8s.io/v1 (the APIResourceList of that group version)."""
    names = {str(r.get("name")) for r in discovery.get("resources") or [] if isinstance(r, dict)}
    return {"validatingadmissionpolicies", "validatingadmissionpolicybindings"} <= names


def username(review: Mapping[str, Any]) -> str:
    """The username a SelfSubjectReview answered ("" when it says none)."""
    info = ((review.get("status") or {}).get("userInfo")) or {}
    return str(info.get("username") or "")


def cel_string(text: str) -> str:
    """`text` as a CEL string literal (single quotes, backslash escapes)."""
    if not text:
        raise IdentityError("the controller's identity in the member is empty")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise IdentityError(f"the identity {text!r} holds control characters")
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _labels() -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGED_BY}


def expression(identity: str) -> str:
    """Allowed: the controller; a deletion in a namespace being deleted (its controller empties
    it). Everything else that matched — a guard created, changed or deleted — is refused."""
    return (
        f"request.userInfo.username == {cel_string(identity)} || "
        "(request.operation == 'DELETE' && has(namespaceObject.metadata.deletionTimestamp))"
    )


def message(identity: str) -> str:
    return (
        f"ResourceQuotas labelled {GUARD_LABEL} are karmadaquota's member guards: only "
        f"{identity} may create, change or delete them"
    )


def policy(identity: str) -> JSON:
    """The ValidatingAdmissionPolicy refusing writes of guards by anyone but `identity`."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": _labels()},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["resourcequotas"],
                    }
                ],
                "objectSelector": {
                    "matchExpressions": [{"key": GUARD_LABEL, "operator": "Exists"}]
                },
            },
            "validations": [
                {
                    "expression": expression(identity),
                    "message": message(identity),
                    "reason": "Forbidden",
                }
            ],
        },
    }


def binding() -> JSON:
    """The binding that puts `policy` in force (Deny) for every namespace."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": _labels()},
        "spec": {"policyName": POLICY_NAME, "validationActions": ["Deny"]},
    }


def up_to_date(have: Mapping[str, Any] | None, want: Mapping[str, Any]) -> bool:
    """`have` (as stored: defaults filled in by the server) holds everything `want` says."""
    return have is not None and _contains(have.get("spec"), want.get("spec"))


def _contains(have: Any, want: Any) -> bool:
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_contains(have.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(have) == len(want)
            and all(_contains(h, w) for h, w in zip(have, want, strict=True))
        )
    return bool(have == want)


def replacing(have: Mapping[str, Any], want: JSON) -> JSON:
    """`want` as a PUT over `have` (its resourceVersion kept: a compare-and-swap)."""
    rv = (have.get("metadata") or {}).get("resourceVersion")
    meta = {**want["metadata"], "resourceVersion": rv}
    return {**want, "metadata": meta}
