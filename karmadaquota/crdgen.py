"""Generate the KarmadaQuota CustomResourceDefinition from the pydantic models.

The models are the source of truth; `api/crds/quota.karmada.io_karmadaquotas.yaml` is their
output (`hack/gen-crds`), and a unit test fails when the committed YAML drifts. Pydantic's JSON
schema is turned into a Kubernetes *structural* schema: references inlined, optionals unwrapped,
titles and defaults dropped, quantities as int-or-string with Kubernetes' quantity pattern.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

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
        "rule": "!has(self.hard) || !self.hard.exists(k, k.startsWith('limits.'))",
        "message": "limits are not chargeable: ResourceBindings carry resource requests only",
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


def _schema() -> dict[str, Any]:
    raw = api.KarmadaQuota.model_json_schema()
    defs = raw.get("$defs", {})
    schema: dict[str, Any] = _structural(raw, defs)
    schema.pop("$defs", None)
    schema.pop("required", None)
    schema["description"] = " ".join((api.KarmadaQuota.__doc__ or "").split())
    props = schema["properties"]
    props["apiVersion"] = {"type": "string"}
    props["kind"] = {"type": "string"}
    props["metadata"] = {"type": "object"}
    spec = props["spec"]
    spec["x-kubernetes-validations"] = SPEC_RULES
    expr = spec["properties"]["scopeSelector"]["properties"]["matchExpressions"]
    expr["maxItems"] = 16
    expr["items"]["x-kubernetes-validations"] = EXPRESSION_RULES
    expr["items"]["properties"]["values"]["maxItems"] = 64
    expr["items"]["properties"]["values"]["items"]["maxLength"] = 253
    spec["properties"]["scopes"]["maxItems"] = 2
    spec["properties"]["clusterHard"]["maxProperties"] = 256
    return schema


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition object for quota.karmada.io/v1alpha1 KarmadaQuota."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{api.PLURAL}.{api.GROUP}"},
        "spec": {
            "group": api.GROUP,
            "names": {
                "kind": api.KIND,
                "listKind": f"{api.KIND}List",
                "plural": api.PLURAL,
                "singular": api.SINGULAR,
                "shortNames": api.SHORT_NAMES,
                "categories": ["karmada-io"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {
                            # True once karmada-apiserver sends the namespace's bindings to
                            # the webhook (the namespace carries the enforcement label)
                            "name": "Enforced",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="Enforced")].status',
                            "description": "whether bindings of this namespace are checked "
                            "against the quota (its Enforced condition)",
                        },
                        {
                            "name": "Summary",
                            "type": "string",
                            "jsonPath": ".status.summary",
                            "description": "used/hard per resource",
                        },
                        {
                            "name": "Queued",
                            "type": "integer",
                            "jsonPath": ".status.queued",
                            "description": "workloads queued by this quota (onExceed: Queue)",
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {"openAPIV3Schema": _schema()},
                }
            ],
        },
    }


class _NoAliases(yaml.SafeDumper):
    """Kubernetes manifests are read by people: repeat shared sub-schemas, no YAML anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render() -> str:
    header = "# Generated by hack/gen-crds from karmadaquota/api.py — do not edit.\n"
    return header + yaml.dump(crd(), Dumper=_NoAliases, sort_keys=True, width=100)


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
        "| field | type | description |",
        "|---|---|---|",
    ]
    rows: list[tuple[str, str, str]] = []
    for top in ("spec", "status"):
        _field_rows({"properties": {top: schema["properties"][top]}}, "", rows)
    out += [f"| `{p}` | {t} | {d} |" for p, t, d in rows]
    out += ["", "## Validation rules enforced by the API server (CEL)", ""]
    out += [f"- `spec`: {r['message']}" for r in SPEC_RULES]
    out += [f"- `spec.scopeSelector.matchExpressions[]`: {r['message']}" for r in EXPRESSION_RULES]
    out += [
        "",
        "The webhook's `/validate-karmadaquota` adds what CEL cannot check cheaply: quantity "
        "syntax and sign, and the exact set of chargeable resource names (docs/charging.md).",
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    if sys.argv[1:] == ["--markdown"]:
        sys.stdout.write(render_markdown())
    else:
        sys.stdout.write(render())
