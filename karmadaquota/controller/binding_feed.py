"""ResourceBinding events into the binding index (an `informer.Handler`).

Beside the index it feeds: each event is observed (charged once, `index.safe_observe`) and
applied; a change marks the recompute of its namespace (and of the cluster quotas selecting
it). A status or metadata-only update is skipped without charging: the charge reads only the
spec, and every change of a ResourceBinding's spec bumps its generation (status is a
subresource) — except our queued-by annotation and a queued binding's resourceVersion (its
admission's precondition), which are always read again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import Gauge

from karmadaquota import queued
from karmadaquota.controller.index import BindingIndex, TemplatePods, safe_observe
from karmadaquota.controller.template_bindings import TemplateBindings
from karmadaquota.kube.versions import parse_rv


class BindingFeed:
    """`mark(ns)`: the namespace's usage changed; `relisted()`: a full list was folded in."""

    def __init__(
        self,
        index: BindingIndex,
        templates: TemplatePods | None,
        template_bindings: TemplateBindings,
        indexed: Gauge,
        mark: Callable[[str], None],
        relisted: Callable[[], None],
    ) -> None:
        self.index = index
        self.templates = templates
        self.template_bindings = template_bindings
        self._indexed = indexed
        self._mark = mark
        self._relisted = relisted

    def added(self, obj: Mapping[str, Any]) -> None:
        seen = safe_observe(obj, self.index.intern, self.templates)
        if seen is not None:
            name = seen.entry.name if seen.entry is not None else ""
            self.template_bindings.track(
                seen.namespace,
                seen.uid,
                name,
                seen.template if seen.entry is not None else None,
                obj if seen.waiting else None,
            )
        if seen is not None and self.index.apply(seen):
            self._mark(seen.namespace)
        self._indexed.set(len(self.index))

    def modified(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        have = self.index.get(str(meta.get("namespace", "")), str(meta.get("uid", "")))
        generation = meta.get("generation")
        if (
            have is not None
            and isinstance(generation, int)
            and generation > 0
            and have.generation == generation
            and have.marked == queued.marked(obj)
            and have.queue is None
        ):
            return  # a status or metadata update (the module docstring)
        self.added(obj)

    def deleted(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        ns, uid = str(meta.get("namespace", "")), str(meta.get("uid", ""))
        self.template_bindings.forget(ns, uid)
        if self.index.remove(ns, uid, parse_rv(meta.get("resourceVersion"))):
            self._mark(ns)
        self._indexed.set(len(self.index))

    def relisted(self, resource_version: int) -> None:
        self.index.forget_deletions_before(resource_version)
        self._relisted()
