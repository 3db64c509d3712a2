"""Which overrides of an OverridePolicy change what a binding is charged — pure.

Karmada renders each member's Work from the resource template and applies the OverridePolicies
that select it *last* (`ensureWork`): a plaintext overrider (a JSON patch on the template) that
replaces `/spec/replicas` or a container's `resources` runs more in the member than the binding,
which was sized from the template before overrides, was charged for. Namespace editors may write
OverridePolicies (Karmada's `karmada-edit`), so in a namespace with a quota an untrusted writer may
not write an override that reaches what a charge reads (the webhook refuses it: docs/security.md).

What a charge reads of a rendered workload, and so what an override must not touch:
- the replica count and job sizing: any path through `replicas`, `parallelism`, `completions`;
- the pod's resources: any path through `resources` (container or pod level) or `overhead`, and
  whether an init container is a sidecar (`initContainers/<i>/restartPolicy`);
- anything that holds those: the document root, a `spec`, a `template`, a `jobTemplate`, a whole
  container list or a whole container (adding one adds its requests);
- the `resourcetemplate.karmada.io/retain-replicas` label (a plaintext path to it, a value for
  the whole labels or metadata holding it, or a `labelsOverrider` setting it): with it Karmada
  keeps each member's own replicas, which no charge counts.
Everything else — other labels, annotations, images, commands, arguments, env, node selectors,
tolerations, a field inside a JSON/YAML string (`fieldOverrider`) — changes nothing charged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from karmadaquota.pod_template import RETAIN_REPLICAS

# a path through one of these reads (or rewrites) what is charged
CHARGED_SEGMENTS = frozenset({"replicas", "parallelism", "completions", "resources", "overhead"})
# replacing or removing one of these whole replaces what is charged inside it
HOLDERS = frozenset({"", "spec", "template", "jobTemplate"})
CONTAINER_LISTS = frozenset({"containers", "initContainers", "ephemeralContainers"})


def _segments(path: str) -> list[str]:
    """A JSON pointer's reference tokens, unescaped (RFC 6901)."""
    if path in ("", "/"):
        return [""]
    return [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]]


def touches_charge(path: str) -> bool:
    """Whether a JSON patch operation on `path` of a workload may change what is charged."""
    tokens = _segments(path)
    if any(t in CHARGED_SEGMENTS for t in tokens):
        return True
    if tokens == ["metadata", "labels", RETAIN_REPLICAS]:
        return True  # the label with which Karmada keeps the members' own replicas
    last = tokens[-1]
    if last in HOLDERS or last in CONTAINER_LISTS:
        return True
    if len(tokens) >= 2 and tokens[-2] in CONTAINER_LISTS:
        return True  # a whole container, or one added ("-")
    for i, t in enumerate(tokens[:-2]):
        if t == "initContainers" and tokens[i + 2] == "restartPolicy":
            return True  # a sidecar's requests add up, an init container's do not
    return False


def _plaintext(overriders: Any, where: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if not isinstance(overriders, Mapping):
        return
    ops = overriders.get("plaintext") or []
    if not isinstance(ops, list):
        return
    for j, op in enumerate(ops):
        if isinstance(op, Mapping):
            yield f"{where}.plaintext[{j}]", op


def _retaining(overriders: Any, where: str) -> Iterator[str]:
    """`labelsOverrider` entries that set the retain-replicas label."""
    if not isinstance(overriders, Mapping):
        return
    ops = overriders.get("labelsOverrider") or []
    for j, op in enumerate(ops if isinstance(ops, list) else []):
        if not isinstance(op, Mapping) or op.get("operator") == "remove":
            continue
        value = op.get("value")
        if isinstance(value, Mapping) and RETAIN_REPLICAS in value:
            yield f"{where}.labelsOverrider[{j}]: {op.get('operator', '')} {RETAIN_REPLICAS}"


def charged_overrides(policy: Mapping[str, Any]) -> list[str]:
    """Each overrider of an OverridePolicy that may change what is charged, as
    `<field path>: <operator> <path>`; empty when the policy changes nothing charged."""
    spec = policy.get("spec")
    if not isinstance(spec, Mapping):
        return []
    found: list[tuple[str, Mapping[str, Any]]] = list(
        _plaintext(spec.get("overriders"), "spec.overriders")
    )
    out = list(_retaining(spec.get("overriders"), "spec.overriders"))
    rules = spec.get("overrideRules") or []
    if isinstance(rules, list):
        for i, rule in enumerate(rules):
            if isinstance(rule, Mapping):
                where = f"spec.overrideRules[{i}].overriders"
                found.extend(_plaintext(rule.get("overriders"), where))
                out.extend(_retaining(rule.get("overriders"), where))
    for where, op in found:
        path = str(op.get("path") or "")
        if touches_charge(path) or _sets_retain(path, op.get("value")):
            out.append(f"{where}: {op.get('operator', '')} {path or '/'}")
    return out


def _sets_retain(path: str, value: Any) -> bool:
    """A plaintext value for the whole labels or metadata that holds the retain label."""
    tokens = _segments(path)
    if tokens == ["metadata"] and isinstance(value, Mapping):
        value = value.get("labels")
    elif tokens != ["metadata", "labels"]:
        return False
    return isinstance(value, Mapping) and RETAIN_REPLICAS in value
