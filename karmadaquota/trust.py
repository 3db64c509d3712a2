"""Who may write what a charge is computed from (docs/security.md: the threat model).

Karmada's default roles (`karmada-edit`, aggregated into Kubernetes' `edit` and `admin`) let a
namespace editor create, update and delete ResourceBindings and their status in the namespace.
A binding's spec is what the webhook charges and what Karmada's binding controller renders
into member clusters (`clusters ∪ requiredBy`, eviction tasks, `replicas`), and its metadata is
how Karmada finds what it rendered (the `resourcebinding.karmada.io/permanent-id` label names
its Works: relabelled, the old Works are orphaned and keep running) and when it may forget it
(finalizers, owner references). So a tenant who may rewrite any of it may run more than was
charged. In a namespace with a quota, only *trusted writers* — Karmada's own controllers and
scheduler, karmadaquota, cluster admins — may create a binding or change anything of it but its
status; everyone else is refused in Kubernetes' words. An allow-list: what an untrusted writer
may change is named (`changed_fields`), everything else is refused.

Trust is decided from the review's `request.userInfo`, which karmada-apiserver fills from the
authenticated caller (a review itself is believed only from karmada-apiserver: docs/security.md).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Cluster admins: the group every Karmada installer puts its components' client certificates in
# (Helm chart, karmadactl init, karmada-operator, hack/local-up-karmada.sh) and the test bed.
DEFAULT_GROUPS = ("system:masters",)
# karmadaquota's own controller with the least-privilege identity the manifests create (it admits
# queued bindings by clearing their suspension and our annotation)
DEFAULT_USERS = ("system:serviceaccount:karmada-system:karmadaquota-controller",)


class UserInfo(BaseModel):
    """authentication.k8s.io/v1 UserInfo, as karmada-apiserver puts it in a review."""

    model_config = ConfigDict(extra="ignore")
    username: str = ""
    uid: str = ""
    groups: list[str] = Field(default_factory=list)


def _matches(patterns: Iterable[str], value: str) -> bool:
    """`value` is one of `patterns`; a pattern ending in `*` matches by prefix."""
    for p in patterns:
        if p.endswith("*") and value.startswith(p[:-1]):
            return True
        if p == value:
            return True
    return False


@dataclass(frozen=True, slots=True)
class Writers:
    """The trusted writers: users (a trailing `*` matches a prefix, e.g.
    `system:serviceaccount:karmada-system:*`) and groups."""

    users: tuple[str, ...] = DEFAULT_USERS
    groups: tuple[str, ...] = DEFAULT_GROUPS

    @classmethod
    def of(cls, users: Sequence[str], groups: Sequence[str]) -> Writers:
        """From flags: each may be given several times or comma-separated; none given means
        the default (giving any replaces it)."""
        u = tuple(x.strip() for v in users for x in v.split(",") if x.strip())
        g = tuple(x.strip() for v in groups for x in v.split(",") if x.strip())
        return cls(users=u or DEFAULT_USERS, groups=g or DEFAULT_GROUPS)

    def trusts(self, user: UserInfo) -> bool:
        return _matches(self.users, user.username) or any(
            _matches(self.groups, g) for g in user.groups
        )


# The metadata the API server itself writes on every UPDATE, whoever asks, before validating
# admission sees the review: `resourceVersion` (the client's precondition, or none for an
# unconditional update), `managedFields` (the field manager's record of the writer) and
# `generation` (restored from the stored object, then raised by the server when the spec
# changes: the spec is compared itself). Nothing else is exempt: `uid`, `name`, `namespace`,
# `creationTimestamp`, `deletionTimestamp` and `deletionGracePeriodSeconds` are restored and
# validated immutable by the API server before admission (ValidateObjectMetaUpdate), so they
# never differ in a real review, and exempting them would only let a forged one through.
SERVER_WRITTEN = frozenset({"resourceVersion", "managedFields", "generation"})
# the status subresource's, which no charge reads (an UPDATE of the binding itself cannot change
# it: the API server keeps the stored status)
STATUS = "status"
# the maps whose keys are named one by one in a refusal
_KEYED = ("labels", "annotations")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _differs(a: object, b: object) -> bool:
    """Unequal as the API server stores them: an empty value is an absent one (omitempty)."""
    return (a or None) != (b or None)


def _keys(prefix: str, a: object, b: object) -> list[str]:
    """`prefix[key]` for every key whose value differs between two maps."""
    x, y = _mapping(a), _mapping(b)
    return [f"{prefix}[{k}]" for k in sorted(set(x) | set(y)) if _differs(x.get(k), y.get(k))]


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Every field of a binding an UPDATE changes that only trusted writers may change: all but
    `status` and the metadata the API server writes itself (SERVER_WRITTEN), so a field Karmada
    adds tomorrow is refused, not passed. Spec fields are named `spec.<field>`, labels and
    annotations by key (`metadata.labels[<key>]`), other metadata `metadata.<field>`."""
    out: list[str] = []
    for key in sorted((set(old) | set(new)) - {STATUS}):
        a, b = old.get(key), new.get(key)
        if not _differs(a, b):
            continue
        if key == "metadata":
            x, y = _mapping(a), _mapping(b)
            for m in sorted((set(x) | set(y)) - SERVER_WRITTEN):
                if m in _KEYED:
                    out += _keys(f"metadata.{m}", x.get(m), y.get(m))
                elif _differs(x.get(m), y.get(m)):
                    out.append(f"metadata.{m}")
        elif key == "spec" and isinstance(a, Mapping) and isinstance(b, Mapping):
            out += [f"spec.{k}" for k in sorted(set(a) | set(b)) if _differs(a.get(k), b.get(k))]
        else:
            out.append(key)
    return out


def listed(fields: Sequence[str], most: int = 10) -> str:
    """At most `most` field names, and how many more: a refusal's message and log line stay
    small however many labels a request changes."""
    shown = ", ".join(fields[:most])
    return f"{shown} and {len(fields) - most} more" if len(fields) > most else shown


def forbidden_message(kind: str, name: str, user: UserInfo, verb: str, what: str) -> str:
    """Kubernetes' wording for a forbidden request (apimachinery's NewForbidden), naming the
    writer and what only trusted writers may do."""
    who = user.username or "system:anonymous"
    return (
        f'{kind} "{name}" is forbidden: user "{who}" may not {verb} {what} in a namespace with '
        "a KarmadaQuota (only Karmada's controllers and scheduler, karmadaquota and cluster "
        "admins may: docs/security.md)"
    )
