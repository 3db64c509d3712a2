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
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)


class InvalidName(ValueError):
    """A namespace or object name that no Kubernetes object can have."""


def _rfc1123_errors(value: str, most: int, regex: str, msg: str, *examples: str) -> list[str]:
    """apimachinery's IsDNS1123Label and IsDNS1123Subdomain: the length bound, then the
    pattern, whose message is built as its RegexError builds it."""
    errors = []
    if len(value) > most:
        errors.append(f"must be no more than {most} characters")
    if not re.fullmatch(regex, value):
        shown = " or ".join(f"'{e}', " for e in examples)
        errors.append(f"{msg} (e.g. {shown}regex used for validation is '{regex}')")
    return errors


def label_errors(value: str) -> list[str]:
    """Why `value` is not an RFC 1123 label (a namespace's name), in apimachinery's words."""
    return _rfc1123_errors(value, LABEL_MAX, _LABEL, _LABEL_MSG, "my-name", "123-abc")


def subdomain_errors(value: str) -> list[str]:
    """Why `value` is not an RFC 1123 subdomain (most objects' names), in apimachinery's words."""
    return _rfc1123_errors(value, SUBDOMAIN_MAX, _SUBDOMAIN, _SUBDOMAIN_MSG, "example.com")


def _valid(value: str, errors: list[str], what: str) -> str:
    if errors:
        raise InvalidName(f"invalid {what} {value[:80]!r}: {'; '.join(errors)}")
    return value


def namespace_name(value: str) -> str:
    """`value`, once it is a valid namespace name; else InvalidName saying why."""
    return _valid(value, label_errors(value), "namespace")


def object_name(value: str) -> str:
    """`value`, once it is a valid object name (a subdomain); else InvalidName saying why."""
    return _valid(value, subdomain_errors(value), "name")


def _collection(api_version: str, plural: str, namespace: str | None) -> str:
    """A namespaced type's collection, in one namespace or across all of them."""
    if namespace:
        return f"/apis/{api_version}/namespaces/{namespace_name(namespace)}/{plural}"
    return f"/apis/{api_version}/{plural}"


def quotas(namespace: str | None = None) -> str:
    """The KarmadaQuota collection, in one namespace or across all of them."""
    return _collection(api.API_VERSION, api.PLURAL, namespace)


def quota(namespace: str, name: str) -> str:
    return f"{quotas(namespace_name(namespace))}/{object_name(name)}"


def quota_status(namespace: str, name: str) -> str:
    return f"{quota(namespace, name)}/status"


def cluster_quotas() -> str:
    """The ClusterKarmadaQuota collection (cluster-scoped)."""
    return f"/apis/{api.API_VERSION}/{api.CLUSTER_PLURAL}"


def cluster_quota(name: str) -> str:
    return f"{cluster_quotas()}/{name}"


def cluster_quota_status(name: str) -> str:
    return f"{cluster_quota(name)}/status"


def bindings(namespace: str | None = None) -> str:
    return _collection(api.BINDING_API_VERSION, api.BINDING_PLURAL, namespace)


def binding(namespace: str, name: str) -> str:
    return f"{bindings(namespace_name(namespace))}/{object_name(name)}"
