"""REST paths of the objects karmadaquota reads and writes.

Every namespace and name is checked before it becomes part of a path: they come from
admission reviews and objects that anyone who can reach a port or write a binding may shape,
and `../`, `?`, `/` or `%2F` in one would aim a request at another object or API. Kubernetes'
own rules (apimachinery's IsDNS1123Label / IsDNS1123Subdomain) decide; a name that breaks them
raises `InvalidName` with Kubernetes' wording instead of reaching the API server.
"""

from __future__ import annotations

import re

from karmadaquota import api

_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(\.{_LABEL})*"
LABEL_MAX = 63
SUBDOMAIN_MAX = 253


class InvalidName(ValueError):
    """A namespace or object name that no Kubernetes object can have."""


def label_errors(value: str) -> list[str]:
    """Why `value` is not an RFC 1123 label (a namespace's name), in apimachinery's words."""
    errors = []
    if len(value) > LABEL_MAX:
        errors.append(f"must be no more than {LABEL_MAX} characters")
    if not re.fullmatch(_LABEL, value):
        errors.append(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
            "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
            f"'123-abc', regex used for validation is '{_LABEL}')"
        )
    return errors


def subdomain_errors(value: str) -> list[str]:
    """Why `value` is not an RFC 1123 subdomain (most objects' names), in apimachinery's words."""
    errors = []
    if len(value) > SUBDOMAIN_MAX:
        errors.append(f"must be no more than {SUBDOMAIN_MAX} characters")
    if not re.fullmatch(_SUBDOMAIN, value):
        errors.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character (e.g. "
            f"'example.com', regex used for validation is '{_SUBDOMAIN}')"
        )
    return errors


def namespace_name(value: str) -> str:
    """`value`, once it is a valid namespace name; else InvalidName saying why."""
    errors = label_errors(value)
    if errors:
        raise InvalidName(f"invalid namespace {value[:80]!r}: {'; '.join(errors)}")
    return value


def object_name(value: str) -> str:
    """`value`, once it is a valid object name (a subdomain); else InvalidName saying why."""
    errors = subdomain_errors(value)
    if errors:
        raise InvalidName(f"invalid name {value[:80]!r}: {'; '.join(errors)}")
    return value


def quotas(namespace: str | None = None) -> str:
    """The KarmadaQuota collection, in one namespace or across all of them."""
    base = f"/apis/{api.GROUP}/{api.VERSION}"
    if namespace:
        return f"{base}/namespaces/{namespace_name(namespace)}/{api.PLURAL}"
    return f"{base}/{api.PLURAL}"


def quota(namespace: str, name: str) -> str:
    return f"{quotas(namespace_name(namespace))}/{object_name(name)}"


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
    if namespace:
        return f"{base}/namespaces/{namespace_name(namespace)}/{api.BINDING_PLURAL}"
    return f"{base}/{api.BINDING_PLURAL}"


def binding(namespace: str, name: str) -> str:
    return f"{bindings(namespace_name(namespace))}/{object_name(name)}"
