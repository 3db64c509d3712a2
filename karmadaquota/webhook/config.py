"""The optional limitedResources file, as Kubernetes' ResourceQuotaConfiguration has it.

    apiVersion: apiserver.config.k8s.io/v1
    kind: ResourceQuotaConfiguration
    limitedResources:
    - resource: resourcebindings
      matchContains: [requests.nvidia.com/gpu]
      matchScopes:
      - {scopeName: PriorityClass, operator: In, values: [high]}

A binding whose charge names a matchContains resource, or that matches a matchScopes
expression, is admitted only where a quota covering it exists.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from karmadaquota.api import BINDING_PLURAL, ScopedResourceSelectorRequirement, describe
from karmadaquota.evaluate import LimitedResource
from karmadaquota.scopes import expression, validate_expression


class ConfigError(ValueError):
    """The configuration file cannot be used; the message names the file and the field."""


class _LimitedResource(BaseModel):
    model_config = ConfigDict(extra="forbid")
    apiGroup: str = ""
    resource: str = BINDING_PLURAL
    matchContains: list[str] = Field(default_factory=list)
    matchScopes: list[ScopedResourceSelectorRequirement] = Field(default_factory=list)


class _LimitedFile(BaseModel):
    model_config = ConfigDict(extra="ignore")
    apiVersion: str = "apiserver.config.k8s.io/v1"
    kind: str = "ResourceQuotaConfiguration"
    limitedResources: list[_LimitedResource] = Field(default_factory=list)


def load_limited(path: str | Path) -> list[LimitedResource]:
    """Parse and validate the file; only entries for resourcebindings apply."""
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
        parsed = _LimitedFile.model_validate(raw)
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read limitedResources configuration: {e}") from None
    except ValidationError as e:
        raise ConfigError(f"{path}: invalid ResourceQuotaConfiguration: {describe(e)}") from None
    if parsed.kind != "ResourceQuotaConfiguration":
        raise ConfigError(f"{path}: kind must be ResourceQuotaConfiguration, got {parsed.kind!r}")
    out: list[LimitedResource] = []
    for i, entry in enumerate(parsed.limitedResources):
        errors: list[str] = []
        for j, expr in enumerate(entry.matchScopes):
            errors.extend(validate_expression(expr, f"limitedResources[{i}].matchScopes[{j}]"))
        if errors:
            raise ConfigError(f"{path}: " + "; ".join(errors))
        if entry.resource != BINDING_PLURAL:
            continue
        out.append(
            LimitedResource(
                match_contains=tuple(entry.matchContains),
                match_scopes=tuple(expression(x) for x in entry.matchScopes),
            )
        )
    return out
