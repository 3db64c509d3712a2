"""Which kinds a charge may admit against a quota tracking what runs: an allow-list (pure).

A binding's `spec.resource` is rendered into the members as it is. Its charge counts the pods
it runs only where that is known: a kind whose replicas Karmada's default interpreter counts
and whose pod template `pod_template` reads (Deployment, StatefulSet, ReplicaSet, Job, Pod), a
kind the platform team declared (its replicas and pod template paths, as Karmada's resource
interpreter customizations read them: `Declared`), or a kind known to run no pods at all
(`NO_PODS`, or declared so by the platform team: `--podless-kind`), which is charged its own
object and never replicas, whatever the binding's
`requiredBy` says (a dependency binding carries its owner's clusters and replicas there).

Any other kind (a DaemonSet, a custom resource with a third-party interpreter) may run pods no
charge counts: `uncounted` names it, and a quota tracking pods or compute refuses it only where
the members do not enforce it (`memberEnforcement: None`, `evaluate._check_uncounted`): where
they do, admission charges what it understands and the member guards bound the rest. Both the
webhook and the controller charge with the same `Kinds`, so both agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from karmadaquota import pod_template

# Kinds that run no pods, whatever the binding says (group, kind): what they make a member do
# starts no container. Not here, so refused against pods/compute unless declared: a
# HorizontalPodAutoscaler (a member's scales its workload past the charge), anything that
# embeds a pod template, and every custom resource (its controller may create pods).
NO_PODS = frozenset(
    {
        ("", "ConfigMap"),
        ("", "Secret"),
        ("", "Service"),
        ("", "ServiceAccount"),
        ("", "PersistentVolumeClaim"),
        ("", "Endpoints"),
        ("", "LimitRange"),
        ("", "ResourceQuota"),
        ("discovery.k8s.io", "EndpointSlice"),
        ("networking.k8s.io", "Ingress"),
        ("networking.k8s.io", "NetworkPolicy"),
        ("policy", "PodDisruptionBudget"),
        ("rbac.authorization.k8s.io", "Role"),
        ("rbac.authorization.k8s.io", "RoleBinding"),
        ("coordination.k8s.io", "Lease"),
        # Karmada's and the Multi-Cluster Services API's multi-cluster networking: they export
        # and import Services, and Karmada's own controllers run what serves them
        ("multicluster.x-k8s.io", "ServiceExport"),
        ("multicluster.x-k8s.io", "ServiceImport"),
        ("networking.karmada.io", "MultiClusterService"),
        ("networking.karmada.io", "MultiClusterIngress"),
        # Gateway API routes (a Gateway is not here: some implementations run a proxy per one)
        ("gateway.networking.k8s.io", "HTTPRoute"),
        ("gateway.networking.k8s.io", "GRPCRoute"),
        ("gateway.networking.k8s.io", "ReferenceGrant"),
    }
)
# Kinds that create pods but whose replicas Karmada cannot count: their bindings carry none
# (a DaemonSet runs one per node, a CronJob a Job per schedule). Never declarable.
UNCOUNTABLE = frozenset({("apps", "DaemonSet"), ("batch", "CronJob")})
FLAG = "--workload-kind"
CHART_VALUE = "workloadKinds"
PODLESS_FLAG = "--podless-kind"
PODLESS_CHART_VALUE = "podlessKinds"

_SEGMENT = re.compile(r"^[A-Za-z0-9_-]+$")
_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class Runs(Enum):
    """What a kind's charge may count of what it runs."""

    PODS = "pods"  # its replicas and pod template are known
    NOTHING = "nothing"  # it runs no pods: charged its own object only
    UNKNOWN = "unknown"  # it may run pods no charge counts


@dataclass(frozen=True, slots=True)
class Declared:
    """A kind the platform team declared: where its replicas and its pod template
    (a PodTemplateSpec, e.g. `spec.template`) are, and its API resource (the store watches it)."""

    api_version: str
    kind: str
    resource: str
    replicas: tuple[str, ...]
    template: tuple[str, ...]

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def pod_spec(self) -> tuple[str, ...]:
        return (*self.template, "spec")

    def __str__(self) -> str:
        return (
            f"{self.api_version}/{self.kind}={self.resource}:"
            f"{'.'.join(self.replicas)}:{'.'.join(self.template)}"
        )

    @classmethod
    def parse(cls, text: str) -> Declared:
        """`APIVERSION/KIND=RESOURCE:REPLICAS_PATH:POD_TEMPLATE_PATH`, e.g.
        `apps.kruise.io/v1alpha1/CloneSet=clonesets:spec.replicas:spec.template`; raises
        ValueError naming what is wrong."""
        usage = f"{FLAG}={text!r}: want APIVERSION/KIND=RESOURCE:REPLICAS_PATH:POD_TEMPLATE_PATH"
        target, _, rest = text.partition("=")
        api_version, _, kind = target.rpartition("/")
        parts = rest.split(":")
        if not api_version or not kind or len(parts) != 3:
            raise ValueError(usage)
        resource, replicas, template = parts
        if not _RESOURCE.match(resource):
            raise ValueError(f"{usage}: {resource!r} is not a resource name (e.g. clonesets)")
        paths = []
        for path in (replicas, template):
            segments = tuple(path.split("."))
            if not all(_SEGMENT.match(s) for s in segments):
                raise ValueError(f"{usage}: {path!r} is not a dotted field path")
            paths.append(segments)
        declared = cls(api_version, kind, resource, paths[0], paths[1])
        known = (declared.group, kind)
        if known in UNCOUNTABLE:
            raise ValueError(f"{FLAG}: {kind}.{declared.group}: Karmada cannot count its replicas")
        if known in NO_PODS or known in pod_template.POD_SPEC_PATHS:
            raise ValueError(f"{FLAG}: {_name(*known)} is known already")
        return declared


def parse_podless(text: str) -> tuple[str, str]:
    """A `--podless-kind` value, `APIVERSION/KIND` (e.g. `example.io/v1/Dashboard`), as
    (group, kind); raises ValueError naming what is wrong. A kind known to run pods cannot be
    declared podless: that would charge its pods nothing."""
    api_version, _, kind = text.rpartition("/")
    if (
        not api_version
        or not _SEGMENT.match(kind)
        or not all(_RESOURCE.match(p.replace(".", "-")) for p in api_version.split("/"))
    ):
        raise ValueError(
            f"{PODLESS_FLAG}={text!r}: want APIVERSION/KIND, e.g. example.io/v1/Dashboard"
        )
    key = (api_version.rpartition("/")[0], kind)
    if key in UNCOUNTABLE or key in pod_template.POD_SPEC_PATHS:
        raise ValueError(f"{PODLESS_FLAG}: {_name(*key)} runs pods")
    if key in NO_PODS:
        raise ValueError(f"{PODLESS_FLAG}: {_name(*key)} is known already")
    return key


@dataclass(frozen=True, slots=True)
class Kinds:
    """The built-in lists, the declared kinds (their pods charged) and the kinds declared to
    run no pods, by (group, kind)."""

    declared: Mapping[tuple[str, str], Declared] = field(default_factory=dict)
    podless: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def of(cls, texts: Iterable[str], podless: Iterable[str] = ()) -> Kinds:
        """From the flags' values (each may be comma-separated); raises ValueError."""
        out: dict[tuple[str, str], Declared] = {}
        for one in _values(texts):
            d = Declared.parse(one)
            if (d.group, d.kind) in out:
                raise ValueError(f"{FLAG}: {_name(d.group, d.kind)} is declared twice")
            out[(d.group, d.kind)] = d
        none = set()
        for one in _values(podless):
            key = parse_podless(one)
            if key in out:
                raise ValueError(f"{PODLESS_FLAG}: {_name(*key)} is declared with {FLAG} too")
            none.add(key)
        return cls(out, frozenset(none))

    def runs(self, api_version: str, kind: str) -> Runs:
        return self.runs_kind(api_version.rpartition("/")[0], kind)

    def runs_kind(self, group: str, kind: str) -> Runs:
        key = (group, kind)
        if key in NO_PODS or key in self.podless:
            return Runs.NOTHING
        if key in pod_template.POD_SPEC_PATHS or key in self.declared:
            return Runs.PODS
        return Runs.UNKNOWN

    @staticmethod
    def uncounted(api_version: str, kind: str) -> str:
        """A field error naming why the pods of a kind off the allow-list (`runs` says
        UNKNOWN) are not counted, and the way to declare it."""
        group = api_version.rpartition("/")[0]
        if (group, kind) in UNCOUNTABLE:
            return f"spec.resource: {kind}.{group}: Karmada cannot count its replicas"
        return (
            f"spec.resource: {_name(group, kind)}: not a kind whose pods karmadaquota counts "
            f"(the platform team may declare its replicas and pod template paths: {FLAG}, "
            f"chart value {CHART_VALUE}; or that it runs no pods: {PODLESS_FLAG}, chart value "
            f"{PODLESS_CHART_VALUE})"
        )

    def pod_paths(self, group: str, kind: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """A declared kind's (pod spec path, replicas path); None for any other kind."""
        d = self.declared.get((group, kind))
        return (d.pod_spec, d.replicas) if d is not None else None


def _values(texts: Iterable[str]) -> Iterable[str]:
    """A repeatable flag's values, each of which may be comma-separated."""
    for text in texts:
        yield from filter(None, (t.strip() for t in text.split(",")))


def _name(group: str, kind: str) -> str:
    return f"{kind}.{group}" if group else kind


BUILTIN = Kinds()
