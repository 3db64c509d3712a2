"""Generate the KarmadaQuota and ClusterKarmadaQuota CustomResourceDefinitions from the models.

The models are the source of truth; `api/crds/quota.karmada.io_karmadaquotas.yaml` is their
output (`hack/gen-crds`), and a unit test fails when the committed YAML drifts. Pydantic's JSON
schema is turned into a Kubernetes *structural* schema: references inlined, optionals unwrapped,
titles and defaults dropped, quantities as int-or-string with Kubernetes' quantity pattern.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml
from pydantic import BaseModel

from karmadaquota import api

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
    r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": QUANTITY_PATTERN,
    "x-kubernetes-int-or-string": True,
}
_RESOURCE_LIST = {"type": "object", "additionalProperties": _QUANTITY, "maxProperties": 64}

# CEL cannot see the exact quantity grammar or extended-resource names cheaply; those checks
# live in `validation.py` (served by the webhook). These are the rules CEL states well.
_BE = "'BestEffort'"
_NBE = "'NotBestEffort'"


def _has_scope(scope: str) -> str:
    return (
        f"((has(self.scopes) && {scope} in self.scopes) || (has(self.scopeSelector) && "
        "has(self.scopeSelector.matchExpressions) && "
        f"self.scopeSelector.matchExpressions.exists(e, e.scopeName == {scope})))"
    )


_ANY_SCOPE = (
    "((has(self.scopes) && size(self.scopes) > 0) || (has(self.scopeSelector) && "
    "has(self.scopeSelector.matchExpressions) && size(self.scopeSelector.matchExpressions) > 0))"
)
SPEC_RULES: list[dict[str, str]] = [
    {
        "rule": "!has(self.hard) || self.hard.all(k, !k.startsWith('limits.') || "
        "k in ['limits.cpu', 'limits.memory', 'limits.ephemeral-storage'])",
        "message": "limits may be limits.cpu, limits.memory or limits.ephemeral-storage",
    },
    {
        "rule": f"!({_has_scope(_BE)} && {_has_scope(_NBE)})",
        "message": "conflicting scopes: BestEffort and NotBestEffort",
    },
    {
        "rule": f"!{_has_scope(_BE)} || !has(self.hard) || self.hard.all(k, k == 'pods')",
        "message": "unsupported scope applied to resource: a BestEffort quota may track only pods",
    },
    {
        "rule": f"!{_ANY_SCOPE} || !has(self.hard) || self.hard.all(k, k in "
        "['pods', 'cpu', 'memory', 'requests.cpu', 'requests.memory'] || "
        "(k.startsWith('requests.') && !(k in ['requests.ephemeral-storage', "
        "'requests.storage'])))",
        "message": "unsupported scope applied to resource: a scoped quota may track only pods "
        "and cpu, memory and extended resource requests",
    },
]
EXPRESSION_RULES: list[dict[str, str]] = [
    {
        "rule": "!(self.operator in ['In', 'NotIn']) || "
        "(has(self.values) && size(self.values) > 0)",
        "message": "must be at least one value when `operator` is 'In' or 'NotIn' for scope "
        "selector",
    },
    {
        "rule": "!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || "
        "size(self.values) == 0",
        "message": "must be no value when `operator` is 'Exists' or 'DoesNotExist' for scope "
        "selector",
    },
    {
        "rule": "!(self.scopeName in ['BestEffort', 'NotBestEffort']) || self.operator == 'Exists'",
        "message": "must be 'Exists' when scope is any of BestEffort and NotBestEffort",
    },
]


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    """Rewrite one pydantic JSON-schema node into Kubernetes' structural form."""
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _structural(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    if node.get("x-kq-resource-list"):
        out: dict[str, Any] = dict(_RESOURCE_LIST)
        if "description" in node:
            out["description"] = node["description"]
        return out
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) == 1:
            merged = {k: v for k, v in node.items() if k != "anyOf"}
            merged.update(_structural(options[0], defs))
            return _structural(merged, defs)
    out = {}
    for key, value in node.items():
        if key in ("title", "default"):
            continue
        if key == "properties":
            out[key] = {k: _structural(v, defs) for k, v in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _structural(value, defs)
        else:
            out[key] = value
    if "properties" in out:
        out.setdefault("type", "object")
    return out


# a ClusterKarmadaQuota: what validation.validate_cluster_spec refuses and CEL states well
CLUSTER_SPEC_RULES: list[dict[str, str]] = [
    {
        "rule": "!has(self.onExceed) || self.onExceed == 'Refuse'",
        "message": "onExceed: a ClusterKarmadaQuota refuses (Queue orders one namespace's "
        "bindings against that namespace's quotas)",
    },
    {
        "rule": "!has(self.cohort) || self.cohort == ''",
        "message": "cohort: a ClusterKarmadaQuota does not join a cohort yet",
    },
    {
        "rule": "!has(self.memberEnforcement) || self.memberEnforcement == 'None'",
        "message": "memberEnforcement: a member guard is a ResourceQuota, which holds one "
        "namespace: a ClusterKarmadaQuota cannot have guards",
    },
]
SELECTOR_RULES: list[dict[str, str]] = [
    {
        "rule": "!(self.operator in ['In', 'NotIn']) || "
        "(has(self.values) && size(self.values) > 0)",
        "message": "values: must be specified when `operator` is 'In' or 'NotIn'",
    },
    {
        "rule": "!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || "
        "size(self.values) == 0",
        "message": "values: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
    },
]


def _object_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural schema of every kind's object: described by its model's docstring, with
    the fields the API server fills (apiVersion, kind, metadata) left open."""
    raw = model.model_json_schema()
    schema: dict[str, Any] = _structural(raw, raw.get("$defs", {}))
    schema.pop("$defs", None)
    schema.pop("required", None)
    schema["description"] = " ".join((model.__doc__ or "").split())
    props = schema["properties"]
    props["apiVersion"] = {"type": "string"}
    props["kind"] = {"type": "string"}
    props["metadata"] = {"type": "object"}
    return schema


def _schema(model: type[api.KarmadaQuota] = api.KarmadaQuota) -> dict[str, Any]:
    """A quota kind's schema, with the bounds and CEL rules of its spec."""
    schema = _object_schema(model)
    spec = schema["properties"]["spec"]
    spec["x-kubernetes-validations"] = SPEC_RULES
    expr = spec["properties"]["scopeSelector"]["properties"]["matchExpressions"]
    expr["maxItems"] = 16
    expr["items"]["x-kubernetes-validations"] = EXPRESSION_RULES
    expr["items"]["properties"]["values"]["maxItems"] = 64
    expr["items"]["properties"]["values"]["items"]["maxLength"] = 253
    spec["properties"]["scopes"]["maxItems"] = 2
    spec["properties"]["clusterHard"]["maxProperties"] = 256
    if "namespaceSelector" in spec["properties"]:
        spec["x-kubernetes-validations"] = SPEC_RULES + CLUSTER_SPEC_RULES
        sel = spec["properties"]["namespaceSelector"]["properties"]
        sel["matchExpressions"]["maxItems"] = 32
        sel["matchExpressions"]["items"]["x-kubernetes-validations"] = SELECTOR_RULES
        sel["matchLabels"]["maxProperties"] = 64
    return schema


# True once karmada-apiserver sends the namespace's bindings to the webhook (the namespace
# carries the enforcement label)
def _column(name: str, kind: str, json_path: str, description: str) -> dict[str, str]:
    """One of `kubectl get`'s columns (additionalPrinterColumns)."""
    return {"name": name, "type": kind, "jsonPath": json_path, "description": description}


_ENFORCED_COLUMN = _column(
    "Enforced",
    "string",
    '.status.conditions[?(@.type=="Enforced")].status',
    "whether bindings of this namespace are checked against the quota (its Enforced condition)",
)
_SUMMARY_COLUMN = _column("Summary", "string", ".status.summary", "used/hard per resource")
_EVICTED_COLUMN = _column(
    "Evicted",
    "string",
    '.status.conditions[?(@.type=="EvictionCharged")].message',
    "replicas Karmada evicted from a cluster that are still charged, the cluster's state and "
    "until when (its EvictionCharged condition; empty: none)",
)
_GUARDED_COLUMN = _column(
    "Guarded",
    "string",
    '.status.conditions[?(@.type=="Guarded")].reason',
    "whether every member holds a guard ResourceQuota (EveryMemberGuarded), and if not why: "
    "MemberNotGuarded (its message names each member) or MemberEnforcementNone (opted out)",
)
_AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _crd(
    kind: str,
    plural: str,
    singular: str,
    short: list[str],
    scope: str,
    columns: list[dict[str, str]],
    schema: dict[str, Any],
    status: bool = True,
) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind (`status`: with the status subresource)."""
    subresources: dict[str, Any] = {"subresources": {"status": {}}} if status else {}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{api.GROUP}"},
        "spec": {
            "group": api.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": short,
                "categories": ["karmada-io"],
            },
            "scope": scope,
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    **subresources,
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition object for quota.karmada.io/v1alpha1 KarmadaQuota."""
    queued = _column(
        "Queued", "integer", ".status.queued", "workloads queued by this quota (onExceed: Queue)"
    )
    loans = _column(
        "Loans", "string", ".status.loans", "what it borrows and lends in its cohort (spec.cohort)"
    )
    columns = [_ENFORCED_COLUMN, _GUARDED_COLUMN, _SUMMARY_COLUMN, queued, loans]
    return _crd(
        api.KIND,
        api.PLURAL,
        api.SINGULAR,
        api.SHORT_NAMES,
        "Namespaced",
        [*columns, _EVICTED_COLUMN, _AGE_COLUMN],
        _schema(api.KarmadaQuota),
    )


def cluster_crd() -> dict[str, Any]:
    """The CustomResourceDefinition object for ClusterKarmadaQuota (cluster-scoped)."""
    selected = _column(
        "Namespaces", "integer", ".status.selectedNamespaces", "namespaces the selector picks"
    )
    return _crd(
        api.CLUSTER_KIND,
        api.CLUSTER_PLURAL,
        api.CLUSTER_SINGULAR,
        api.CLUSTER_SHORT_NAMES,
        "Cluster",
        [_SUMMARY_COLUMN, selected, _EVICTED_COLUMN, _AGE_COLUMN],
        _schema(api.ClusterKarmadaQuota),
    )


def applied_crd() -> dict[str, Any]:
    """The CustomResourceDefinition object for AppliedClusterKarmadaQuota (namespaced, the
    controller's read-only view of a cluster quota from one namespace)."""
    columns = [
        {**_SUMMARY_COLUMN, "description": "the cluster quota's used/hard (all its namespaces)"},
        _column("Namespace Used", "string", ".status.namespaceSummary", "this namespace's usage"),
        _AGE_COLUMN,
    ]
    return _crd(
        api.APPLIED_KIND,
        api.APPLIED_PLURAL,
        api.APPLIED_SINGULAR,
        api.APPLIED_SHORT_NAMES,
        "Namespaced",
        columns,
        _object_schema(api.AppliedClusterKarmadaQuota),
        status=False,
    )


class _NoAliases(yaml.SafeDumper):
    """Kubernetes manifests are read by people: repeat shared sub-schemas, no YAML anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(cluster: bool = False, applied: bool = False) -> str:
    header = "# Generated by hack/gen-crds from karmadaquota/api.py — do not edit.\n"
    obj = applied_crd() if applied else cluster_crd() if cluster else crd()
    return header + yaml.dump(obj, Dumper=_NoAliases, sort_keys=True, width=100)


def _field_rows(schema: dict[str, Any], prefix: str, rows: list[tuple[str, str, str]]) -> None:
    for name, prop in schema.get("properties", {}).items():
        path = f"{prefix}.{name}" if prefix else name
        kind = prop.get("type", "")
        if prop.get("x-kubernetes-int-or-string"):
            kind = "quantity"
        elif kind == "object" and "additionalProperties" in prop:
            inner = prop["additionalProperties"]
            nested = inner.get("type") == "object" and "additionalProperties" in inner
            kind = "map[string]map[string]quantity" if nested else "map[string]quantity"
        elif kind == "array":
            kind = f"[]{prop['items'].get('type', '')}"
        if "enum" in prop:
            kind += " (" + " \\| ".join(str(v) for v in prop["enum"]) + ")"
        rows.append((path, kind, " ".join(str(prop.get("description", "")).split())))
        if "properties" in prop:
            _field_rows(prop, path, rows)
        elif prop.get("type") == "array" and "properties" in prop.get("items", {}):
            _field_rows(prop["items"], f"{path}[]", rows)


def render_markdown() -> str:
    """docs/api.md: the API reference, generated from the same schema as the CRD."""
    version = crd()["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    out = [
        "# API reference: KarmadaQuota",
        "",
        "<!-- Generated by hack/gen-crds from karmadaquota/api.py — do not edit. -->",
        "",
        f"`{api.API_VERSION}`, kind `{api.KIND}`, namespaced, short name "
        f"`{', '.join(api.SHORT_NAMES)}`, status subresource. {schema['description']}",
        "",
    ]
    out += _field_table(schema)
    out += ["", "## Validation rules enforced by the API server (CEL)", ""]
    out += [f"- `spec`: {r['message']}" for r in SPEC_RULES]
    out += [f"- `spec.scopeSelector.matchExpressions[]`: {r['message']}" for r in EXPRESSION_RULES]
    out += [
        "",
        "The webhook's `/validate-karmadaquota` adds what CEL cannot check cheaply: quantity "
        "syntax and sign, and the exact set of chargeable resource names (docs/charging.md).",
        "",
    ]
    out += _cluster_markdown()
    return "\n".join(out)


def _field_table(schema: dict[str, Any], tops: tuple[str, ...] = ("spec", "status")) -> list[str]:
    """The reference table of a CRD schema's `tops` fields."""
    rows: list[tuple[str, str, str]] = []
    for top in tops:
        _field_rows({"properties": {top: schema["properties"][top]}}, "", rows)
    return [
        "| field | type | description |",
        "|---|---|---|",
        *(f"| `{p}` | {t} | {d} |" for p, t, d in rows),
    ]


def _cluster_markdown() -> list[str]:
    schema = cluster_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    out = [
        "# API reference: ClusterKarmadaQuota",
        "",
        f"`{api.API_VERSION}`, kind `{api.CLUSTER_KIND}`, cluster-scoped, short name "
        f"`{', '.join(api.CLUSTER_SHORT_NAMES)}`, status subresource. {schema['description']} "
        "The spec is a KarmadaQuota's plus `namespaceSelector` "
        "([cluster-quotas.md](cluster-quotas.md)).",
        "",
    ]
    out += _field_table(schema)
    out += ["", "## Validation rules enforced by the API server (CEL)", ""]
    out += ["- those of a KarmadaQuota's `spec` and `spec.scopeSelector`, and"]
    out += [f"- `spec`: {r['message']}" for r in CLUSTER_SPEC_RULES]
    out += [
        f"- `spec.namespaceSelector.matchExpressions[]`: {r['message']}" for r in SELECTOR_RULES
    ]
    out += [
        "",
        "The webhook's `/validate-karmadaquota` also validates label keys and values of the "
        "selector (Kubernetes' `ValidateLabelSelector`) and refuses `queueingStrategy` "
        "StrictFIFO (no queue to order).",
        "",
    ]
    view = applied_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    out += [
        "# API reference: AppliedClusterKarmadaQuota",
        "",
        f"`{api.API_VERSION}`, kind `{api.APPLIED_KIND}`, namespaced, short name "
        f"`{', '.join(api.APPLIED_SHORT_NAMES)}`. {view['description']} Named as the cluster "
        f"quota, labelled `{api.CLUSTER_QUOTA_LABEL}`, owned by it.",
        "",
    ]
    out += _field_table(view, ("status",))
    out.append("")
    return out


if __name__ == "__main__":
    if sys.argv[1:] == ["--markdown"]:
        sys.stdout.write(render_markdown())
    elif sys.argv[1:] == ["--cluster"]:
        sys.stdout.write(render(cluster=True))
    elif sys.argv[1:] == ["--applied"]:
        sys.stdout.write(render(applied=True))
    else:
        sys.stdout.write(render())
