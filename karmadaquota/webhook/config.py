"""The webhook's configuration (`WebhookConfig`, from its flags: karmadaquota.cli), and the
optional limitedResources file, as Kubernetes' ResourceQuotaConfiguration has it.

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

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from karmadaquota import overrides, trust
from karmadaquota.api import BINDING_PLURAL, ScopedResourceSelectorRequirement, describe
from karmadaquota.evaluate import LimitedResource
from karmadaquota.kinds import BUILTIN, Kinds
from karmadaquota.scopes import expression, validate_expression
from karmadaquota.serving.server import AUX_LIMITS, ServerConfig
from karmadaquota.webhook.batcher import DEFAULT_RESERVATION_BYTES


@dataclass
class WebhookConfig:
    kubeconfig: str | None = None
    cert_file: str = ""
    key_file: str = ""
    bind_address: str = "127.0.0.1"
    port: int = 8443
    reservation_ttl: timedelta = timedelta(seconds=60)
    limited: list[LimitedResource] = field(default_factory=list)
    cert_check_interval: float = 10.0
    max_reservation_bytes: int = DEFAULT_RESERVATION_BYTES
    limits: ServerConfig = field(default_factory=ServerConfig)
    # remember refusals for quota in status.waiting[] (the controller wakes them)
    record_waiting: bool = True
    # /metrics over plain HTTP as well (None: only on the HTTPS port)
    metrics_bind_address: str = "127.0.0.1"
    metrics_port: int | None = None
    # who may create bindings and change their spec in a namespace with a quota
    writers: trust.Writers = field(default_factory=trust.Writers)
    # what an untrusted writer may override where a quota is (+ --override-allowed-path)
    allowed_overrides: overrides.AllowList = field(default_factory=overrides.AllowList)
    # a client certificate signed by this CA is required on the HTTPS port (None: not asked)
    client_ca_file: str | None = None
    # who may read /metrics, on either port (metrics_auth.authorizer)
    metrics_auth: str = "none"
    metrics_auth_kubeconfig: str | None = None
    aux_limits: ServerConfig = AUX_LIMITS
    # the kinds the platform team declared (their replicas and pod template paths) besides the
    # built-in ones (karmadaquota.kinds)
    kinds: Kinds = BUILTIN
    # seconds a cluster is not Ready before its evicted replicas are released (evictions)
    evicted_cluster_grace: float = 0.0


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
