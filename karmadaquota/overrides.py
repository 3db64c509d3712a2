"""Which overrides of an (Cluster)OverridePolicy an untrusted writer may make Karmada render — pure.

Karmada renders each member's Work from the resource template and applies the OverridePolicies
that select it *last* (`ensureWork`, after the binding was charged from the template). Namespace
editors may write OverridePolicies (Karmada's `karmada-edit`), and Karmada's overriders reach any
field: `/spec/replicas`, resources, `/metadata/name` (each rendered name one more full copy in the
member), `/metadata/namespace`, a rollout's `strategy`, an `imageOverrider` predicate aimed at a
quantity. A deny-list of dangerous paths leaks wherever Karmada has one more, so this is an
**allow-list** (docs/security.md has the table and the reason for each entry): in a namespace
with a quota an untrusted writer's policy holds only

- `imageOverrider` without a `predicate` (Karmada rewrites the containers' `image`), or with one
  whose `predicate.path` is a path where a plaintext `replace` is allowed;
- `commandOverrider`, `argsOverrider` (a named container's command and args);
- `labelsOverrider`, `annotationsOverrider` whose keys are outside Karmada's prefixes
  (`karmada.io/`, `*.karmada.io/`, ours `quota.karmada.io/` among them);
- `plaintext` under a path of `DEFAULT_PATHS` (or the platform team's additions), a label or
  annotation of the workload or its pod template under the same key rule, and `/data`,
  `/binaryData`, `/stringData` in a policy that selects only ConfigMaps and Secrets;
- `fieldOverrider` on `/data/<key>` (or `binaryData`, `stringData`) in such a policy.

Everything else — an unknown overrider kind or field, any other path — is refused by name,
except where the policy cannot change what runs (`Judged`):

- a policy that selects only kinds that run no pods (a Service, an Ingress, a ServiceExport:
  `kinds.Kinds.runs`), whose content no quota name prices, may override any path but the
  object's name and namespace: none of them runs a pod, and the names the quota tracks of them
  are counts of objects. Where a quota tracks `services.loadbalancers` or `services.nodeports`,
  a Service's `/spec/type` and `/spec/ports` stay refused;
- where member guards bound the namespace (every quota of it guarded, no ClusterKarmadaQuota
  selecting it), any path but the name and namespace: what the override makes the members run
  is bounded there by each member's guard, which counts the pods as the member admits them
  (docs/security.md, "Defence in depth"). A namespace or name override stays refused: it moves
  the rendered object out of the namespace the guards hold, or onto another object's name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from karmadaquota.kinds import BUILTIN, Kinds, Runs

# Where a pod spec is in the kinds the charge understands: Deployment, StatefulSet, ReplicaSet,
# DaemonSet, Job (`/spec/template`) and CronJob (`/spec/jobTemplate/spec/template`).
POD_TEMPLATES = ("/spec/template", "/spec/jobTemplate/spec/template")
# container fields that choose the program, never how many or how big (`*`: any one token)
CONTAINER_FIELDS = ("image", "imagePullPolicy", "command", "args", "env", "envFrom")
# pod fields that choose nodes inside a member, never the pod's size, count, priority or runtime
POD_FIELDS = ("nodeSelector", "tolerations", "affinity", "topologySpreadConstraints")
POD_REFERENCES = ("imagePullSecrets",)
DEFAULT_PATHS: tuple[str, ...] = tuple(
    [
        f"{t}/spec/{lst}/*/{f}"
        for t in POD_TEMPLATES
        for lst in ("containers", "initContainers")
        for f in CONTAINER_FIELDS
    ]
    + [f"{t}/spec/{f}" for t in POD_TEMPLATES for f in (*POD_FIELDS, *POD_REFERENCES)]
)
# the workload's and its pod template's labels and annotations: allowed key by key
METADATA_MAPS: tuple[tuple[str, ...], ...] = tuple(
    (*prefix, "metadata", m)
    for prefix in ((), *(tuple(t.split("/")[1:]) for t in POD_TEMPLATES))
    for m in ("labels", "annotations")
)
# a ConfigMap's or Secret's content: no pods, no name
DATA_FIELDS = frozenset({"data", "binaryData", "stringData"})
DATA_KINDS = frozenset({"ConfigMap", "Secret"})

# kinds that run no pods but whose content a quota prices or a member applies to pods: a
# policy selecting them keeps the allow-list (a claim's storage, a LimitRange's defaults)
PRICED_KINDS = frozenset({("", "PersistentVolumeClaim"), ("", "LimitRange"), ("", "ResourceQuota")})
# a Service's paths that change a name a quota may track of it
SERVICE_PRICED: Mapping[str, tuple[tuple[str, ...], ...]] = {
    "services.loadbalancers": (("spec", "type"),),
    "services.nodeports": (("spec", "type"), ("spec", "ports")),
}

SPEC_FIELDS = frozenset({"resourceSelectors", "overrideRules", "targetCluster", "overriders"})
RULE_FIELDS = frozenset({"targetCluster", "overriders"})
OPERATORS = frozenset({"add", "remove", "replace"})
# each overrider kind Karmada has (v1.17 to v1.19) and the fields of one entry
ENTRY_FIELDS: Mapping[str, frozenset[str]] = {
    "plaintext": frozenset({"path", "operator", "value"}),
    "imageOverrider": frozenset({"predicate", "component", "operator", "value"}),
    "commandOverrider": frozenset({"containerName", "operator", "value"}),
    "argsOverrider": frozenset({"containerName", "operator", "value"}),
    "labelsOverrider": frozenset({"operator", "value"}),
    "annotationsOverrider": frozenset({"operator", "value"}),
    "fieldOverrider": frozenset({"fieldPath", "json", "yaml"}),
}
PATCH_FIELDS = frozenset({"subPath", "operator", "value"})


class InvalidPattern(ValueError):
    """A path given to extend the allow-list is not a JSON pointer."""


def tokens(path: str) -> list[str]:
    """A JSON pointer's reference tokens, unescaped (RFC 6901), as Karmada's JSON patch reads
    them."""
    return [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]]


def karmada_key(key: str) -> bool:
    """A label or annotation key under Karmada's prefixes (`karmada.io/`, `<x>.karmada.io/`,
    ours `quota.karmada.io/` included): Karmada reads them on the rendered workload
    (retain-replicas, conflict-resolution, its binding ids)."""
    prefix, slash, _ = key.partition("/")
    return bool(slash) and (prefix == "karmada.io" or prefix.endswith(".karmada.io"))


@dataclass(frozen=True, slots=True)
class AllowList:
    """The plaintext paths an untrusted writer may override: a path is allowed at a pattern or
    beneath it; `*` in a pattern stands for any one token."""

    patterns: tuple[tuple[str, ...], ...] = field(
        default_factory=lambda: tuple(tuple(tokens(p)) for p in DEFAULT_PATHS)
    )

    @classmethod
    def extended(cls, extra: Iterable[str]) -> AllowList:
        """The default list plus the platform team's paths (flags: repeat or comma-separate)."""
        added = []
        for value in extra:
            for p in (x.strip() for x in value.split(",")):
                if not p:
                    continue
                if not p.startswith("/") or p == "/":
                    raise InvalidPattern(
                        f"override path {p!r} must be a JSON pointer below the root, "
                        "e.g. /spec/template/spec/priorityClassName"
                    )
                added.append(tuple(tokens(p)))
        return cls(cls().patterns + tuple(added))

    def allows(self, path: list[str]) -> bool:
        return any(
            len(path) >= len(p) and all(a in ("*", b) for a, b in zip(p, path, strict=False))
            for p in self.patterns
        )


@dataclass(frozen=True, slots=True)
class Refusal:
    """One override outside the allow-list: `what` says where and why; `key` identifies what
    it renders (its context, kind and content) to tell an old one from a new one."""

    what: str
    key: bytes


def _json(value: Any) -> bytes:
    """Canonical JSON of a decoded review's value (any integer size: a review may carry one
    orjson cannot write)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Judged:
    """What the policy's namespace tells about its overrides: whether member guards bound it
    (every quota of it guarded, no ClusterKarmadaQuota selecting it), the names its quotas
    track, and the kinds that run no pods. The default knows nothing: the allow-list alone."""

    guarded: bool = False
    tracked: frozenset[str] = frozenset(SERVICE_PRICED)
    kinds: Kinds = BUILTIN


def _moves(at: Sequence[str]) -> bool:
    """A path that renames the object, moves it to another namespace, or replaces all of it."""
    if not at:
        return True
    return at[0] == "metadata" and (len(at) == 1 or at[1] in ("name", "namespace", "generateName"))


@dataclass(frozen=True, slots=True)
class _Rules:
    allowed: AllowList
    data_only: bool  # the policy selects only ConfigMaps and Secrets
    context: bytes  # where the overriders apply: rule or legacy, and the target clusters
    # any path but a move may be overridden but these (`Judged`); None: the allow-list alone
    free: tuple[tuple[str, ...], ...] | None = None

    def refuse(self, what: str, *content: Any) -> Refusal:
        return Refusal(what, self.context + b"|" + _json(list(content)))

    def plaintext_path(self, path: str, operator: Any, value: Any) -> str | None:
        """Why a plaintext operation is refused; None when it is allowed."""
        if not path.startswith("/"):
            return "not a JSON pointer"
        if operator not in OPERATORS:
            return f"operator {operator!r} unknown"
        at = tokens(path)
        for m in METADATA_MAPS:
            if tuple(at[: len(m)]) != m:
                continue
            if len(at) > len(m):
                key = at[len(m)]
                return f"{key} is a Karmada key" if karmada_key(key) else None
            keys = list(value) if isinstance(value, Mapping) else []
            if operator != "remove" and not isinstance(value, Mapping):
                return "not a map of keys"
            named = [k for k in keys if karmada_key(str(k))]
            return f"{', '.join(map(str, named))}: Karmada keys" if named else None
        if self.allowed.allows(at):
            return None
        if self.data_only and at and at[0] in DATA_FIELDS:
            return None
        if self.free is not None and self.unpriced(at):
            return None
        return "not on the allow-list"

    def unpriced(self, at: Sequence[str]) -> bool:
        """Where the policy cannot change what runs (`free`): `at` is no move, and neither at,
        beneath nor above a priced path. Plaintext and field overriders both ask it."""
        n = len(at)
        return not _moves(at) and not any(
            tuple(at[: len(p)]) == p or p[:n] == tuple(at) for p in self.free or ()
        )


def _selected(spec: Mapping[str, Any]) -> list[tuple[str, str]] | None:
    """The (group, kind) of every resource selector; None when some selector names no kind
    (or there is none: then the policy selects every kind)."""
    selectors = spec.get("resourceSelectors")
    if not isinstance(selectors, list) or not selectors:
        return None
    out = []
    for s in selectors:
        if not isinstance(s, Mapping) or not s.get("kind") or not s.get("apiVersion"):
            return None
        out.append((str(s["apiVersion"]).rpartition("/")[0], str(s["kind"])))
    return out


def _free(spec: Mapping[str, Any], judged: Judged) -> tuple[tuple[str, ...], ...] | None:
    """The paths still priced where the policy cannot change what runs (`Judged`), or None
    where it can: the allow-list alone."""
    selected = _selected(spec)
    services = selected is None or ("", "Service") in selected
    priced = tuple(
        sorted(
            {p for name, ps in SERVICE_PRICED.items() if name in judged.tracked for p in ps}
            if services
            else set()
        )
    )
    if judged.guarded:
        return priced
    if selected is None or any(
        (g, k) in PRICED_KINDS or judged.kinds.runs_kind(g, k) is not Runs.NOTHING
        for g, k in selected
    ):
        return None
    return priced


def _selects_data_only(spec: Mapping[str, Any]) -> bool:
    """Every resource selector names a core ConfigMap or Secret (none: every kind)."""
    selectors = spec.get("resourceSelectors")
    return (
        isinstance(selectors, list)
        and bool(selectors)
        and all(
            isinstance(s, Mapping) and s.get("apiVersion") == "v1" and s.get("kind") in DATA_KINDS
            for s in selectors
        )
    )


def _entries(rules: _Rules, where: str, kind: str, ops: Any) -> Iterator[Refusal]:
    if not isinstance(ops, list):
        yield rules.refuse(f"{where}.{kind}: not a list", kind, ops)
        return
    for j, op in enumerate(ops):
        at = f"{where}.{kind}[{j}]"
        if not isinstance(op, Mapping):
            yield rules.refuse(f"{at}: not an object", kind, op)
            continue
        unknown = sorted(set(op) - ENTRY_FIELDS[kind])
        if unknown:
            yield rules.refuse(f"{at}.{unknown[0]}: an unknown field", kind, op)
            continue
        why = _entry(rules, kind, op)
        if why is not None:
            yield rules.refuse(f"{at}: {why}", kind, op)


def _entry(rules: _Rules, kind: str, op: Mapping[str, Any]) -> str | None:
    """Why one overrider entry is refused; None when it is allowed."""
    operator = op.get("operator")
    if kind == "plaintext":
        path = str(op.get("path") or "")
        why = rules.plaintext_path(path, operator, op.get("value"))
        return None if why is None else f"{operator} {path or '/'}: {why}"
    if kind == "imageOverrider":
        predicate = op.get("predicate")
        if predicate is None:
            return None
        at = predicate.get("path") if isinstance(predicate, Mapping) else None
        if not isinstance(at, str) or set(predicate) != {"path"}:
            return "predicate: not {path: <JSON pointer>}"
        # Karmada reads the image at the path split on '/', then patches it as a JSON pointer:
        # an escape would make the two differ
        why = "an escape (~)" if "~" in at else rules.plaintext_path(at, "replace", "")
        return None if why is None else f"predicate.path {at}: {why}"
    if kind in ("commandOverrider", "argsOverrider"):
        return None  # the named container's command or args: the program, never its size
    if kind in ("labelsOverrider", "annotationsOverrider"):
        value = op.get("value")
        if not isinstance(value, Mapping):
            return "value: not a map of keys"
        # Karmada writes each key as a JSON pointer token escaping only '/': '~1' in a key
        # is a '/' of the rendered key
        named = [k for k in value if karmada_key(tokens("/" + str(k).replace("/", "~1"))[0])]
        return f"{operator} {', '.join(map(str, named))}: Karmada keys" if named else None
    return _field_overrider(rules, op)


def _field_overrider(rules: _Rules, op: Mapping[str, Any]) -> str | None:
    """A JSON or YAML document inside a string field: only a ConfigMap's or Secret's data
    (or any field but a move's where the policy cannot change what runs)."""
    path = str(op.get("fieldPath") or "")
    at = tokens(path) if path.startswith("/") else []
    free = rules.free is not None and path.startswith("/") and rules.unpriced(at)
    if not free and not (rules.data_only and len(at) == 2 and at[0] in DATA_FIELDS):
        return (
            f"fieldPath {path or '/'}: only /data/<key> of a policy selecting only ConfigMaps "
            "and Secrets"
        )
    for part in ("json", "yaml"):
        patches = op.get(part) or []
        if not isinstance(patches, list) or not all(
            isinstance(p, Mapping) and set(p) <= PATCH_FIELDS for p in patches
        ):
            return f"{part}: an unknown field"
    return None


def _overriders(rules: _Rules, where: str, overriders: Any) -> Iterator[Refusal]:
    if overriders is None:
        return
    if not isinstance(overriders, Mapping):
        yield rules.refuse(f"{where}: not an object", "overriders", overriders)
        return
    for kind in sorted(overriders):
        ops = overriders[kind]
        if kind not in ENTRY_FIELDS:
            yield rules.refuse(f"{where}.{kind}: not an overrider on the allow-list", kind, ops)
        elif ops is not None:
            yield from _entries(rules, where, kind, ops)


def refusals(
    policy: Mapping[str, Any], allowed: AllowList | None = None, judged: Judged | None = None
) -> list[Refusal]:
    """Each override of an (Cluster)OverridePolicy outside the allow-list (`judged`: what its
    namespace tells, the module docstring); empty when an untrusted writer may write it."""
    spec = policy.get("spec")
    if spec is None:
        return []
    top = _Rules(allowed or AllowList(), False, b"spec")
    if not isinstance(spec, Mapping):
        return [top.refuse("spec: not an object", spec)]
    out = [
        top.refuse(f"spec.{k}: an unknown field", k, spec[k])
        for k in sorted(set(spec) - SPEC_FIELDS)
    ]
    data_only = _selects_data_only(spec)
    free = _free(spec, judged or Judged())
    rules = spec.get("overrideRules") or []
    if not isinstance(rules, list):
        return [*out, top.refuse("spec.overrideRules: not a list", rules)]
    # the deprecated spec.overriders apply only when there are no overrideRules
    legacy = b"legacy-active|" if not rules else b"legacy-inactive|"
    context = _Rules(top.allowed, data_only, legacy + _json(spec.get("targetCluster")), free)
    out.extend(_overriders(context, "spec.overriders", spec.get("overriders")))
    for i, rule in enumerate(rules):
        where = f"spec.overrideRules[{i}]"
        if not isinstance(rule, Mapping):
            out.append(top.refuse(f"{where}: not an object", rule))
            continue
        out.extend(
            top.refuse(f"{where}.{k}: an unknown field", k, rule[k])
            for k in sorted(set(rule) - RULE_FIELDS)
        )
        context = _Rules(top.allowed, data_only, b"rule|" + _json(rule.get("targetCluster")), free)
        out.extend(_overriders(context, f"{where}.overriders", rule.get("overriders")))
    return out


def _selectors(policy: Mapping[str, Any]) -> bytes:
    spec = policy.get("spec")
    return _json(spec.get("resourceSelectors") if isinstance(spec, Mapping) else None)


def only_as_before(
    new: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    refused: Sequence[Refusal],
    allowed: AllowList | None = None,
    judged: Judged | None = None,
) -> bool:
    """No refusal, or an update whose refused overrides are exactly the old policy's, in the
    same order, for the same clusters and the same resources (a policy written before its
    namespace had a quota): it renders nothing the old one did not. Order and count matter:
    a second `add` of a container adds one more, and dropping the later of two replacements
    of one field leaves the earlier one in force."""
    if not refused:
        return True
    if old is None or _selectors(new) != _selectors(old):
        return False
    return [r.key for r in refusals(old, allowed, judged)] == [r.key for r in refused]
