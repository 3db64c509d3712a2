"""Who may write what a charge is computed from (docs/security.md: the threat model).

Karmada's default roles (`karmada-edit`, aggregated into Kubernetes' `edit` and `admin`) let a
namespace editor create, update and delete ResourceBindings and their status in the namespace.
A binding's spec is what the webhook charges and what Karmada's binding controller renders
into member clusters (`clusters ∪ requiredBy`, eviction tasks, `replicas`), so a tenant who may
rewrite it may run more than was charged. In a namespace with a quota, only *trusted writers* —
Karmada's own controllers and scheduler, karmadaquota, cluster admins — may create a binding or
change its spec or our queue annotation; everyone else is refused in Kubernetes' words.

Trust is decided from the review's `request.userInfo`, which karmada-apiserver fills from the
authenticated caller (a review itself is believed only from karmada-apiserver: docs/security.md).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from karmadaquota import queued

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


def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, Mapping) else {}


def changed_fields(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """The binding fields an untrusted writer changed that only trusted writers may change:
    every `spec.<field>` that differs (all of them on CREATE), and our queue annotation."""
    before, after = _spec(old), _spec(new)
    out = [f"spec.{k}" for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]
    if old is not None and queued.marked(old) != queued.marked(new):
        out.append(f"metadata.annotations[{queued.ANNOTATION}]")
    return out


def forbidden_message(kind: str, name: str, user: UserInfo, verb: str, what: str) -> str:
    """Kubernetes' wording for a forbidden request (apimachinery's NewForbidden), naming the
    writer and what only trusted writers may do."""
    who = user.username or "system:anonymous"
    return (
        f'{kind} "{name}" is forbidden: user "{who}" may not {verb} {what} in a namespace with '
        "a KarmadaQuota (only Karmada's controllers and scheduler, karmadaquota and cluster "
        "admins may: docs/security.md)"
    )
