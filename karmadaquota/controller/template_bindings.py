"""Which bindings each resource template charges, so that a change of its pod reaches them.

A binding is charged with the most its template's pod costs over the version it names and every
newer one (`kube.templates`). When a template's pod changes without the binding changing (the
binding's update refused, or Karmada's detector down), the binding must be counted again with
it; and a binding whose template version had not arrived is counted again when it does. This
keeps, per template, the names of its bindings (a GET reads one again: rare, and memory stays
small), and the objects of the bindings still waiting for their version (transient).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from karmadaquota.pod_template import TemplateKey

Ref = tuple[str, str]  # namespace, uid


@dataclass(frozen=True, slots=True)
class Again:
    """What to observe again: objects at hand, and bindings to read first (ns, uid, name)."""

    now: list[Mapping[str, Any]]
    read: list[tuple[str, str, str]]


class TemplateBindings:
    def __init__(self) -> None:
        self._by_template: dict[TemplateKey, dict[Ref, str]] = {}
        self._template_of: dict[str, TemplateKey] = {}  # binding uid -> its template
        self._waiting: dict[Ref, Mapping[str, Any]] = {}

    def __len__(self) -> int:
        return len(self._template_of)

    def track(
        self,
        namespace: str,
        uid: str,
        name: str,
        template: TemplateKey | None,
        waiting_obj: Mapping[str, Any] | None,
    ) -> None:
        """The binding as last observed: charged with `template` (None: with no template, or
        being deleted); `waiting_obj` while its template's version has not arrived."""
        self.forget(namespace, uid)
        if template is None:
            return
        self._template_of[uid] = template
        self._by_template.setdefault(template, {})[(namespace, uid)] = name
        if waiting_obj is not None:
            self._waiting[(namespace, uid)] = waiting_obj

    def forget(self, namespace: str, uid: str) -> None:
        self._waiting.pop((namespace, uid), None)
        key = self._template_of.pop(uid, None)
        if key is None:
            return
        bucket = self._by_template.get(key, {})
        bucket.pop((namespace, uid), None)
        if not bucket:
            self._by_template.pop(key, None)

    def again(self, key: TemplateKey, pod_changed: bool) -> Again:
        """The template's version arrived or went: its waiting bindings now; with
        `pod_changed`, every other binding it charges, to be read again."""
        now: list[Mapping[str, Any]] = []
        read: list[tuple[str, str, str]] = []
        for (ns, uid), name in (self._by_template.get(key) or {}).items():
            waiting = self._waiting.get((ns, uid))
            if waiting is not None:
                now.append(waiting)
            elif pod_changed:
                read.append((ns, uid, name))
        return Again(now, read)
