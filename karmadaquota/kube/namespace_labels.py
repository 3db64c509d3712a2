"""Every namespace's labels, mirrored by an informer: what namespace selectors read.

The controller keeps the enforcement labels and a cluster quota's membership from it; the
webhook decides from it which ClusterKarmadaQuotas select a review's namespace (an
AdmissionReview carries no namespace labels). A namespace the table has not seen is not known
to be unselected, nor is any while the watch is broken (`stale`, from a failed list or watch
until the next full list): the webhook refuses with `try again` then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from karmadaquota.kube.informer import Informer, Lister

NAMESPACES = "/api/v1/namespaces"

# name, labels before (None: not seen), labels now (None: deleted)
OnChange = Callable[[str, Mapping[str, str] | None, Mapping[str, str] | None], None]


class NamespaceLabels:
    """name -> labels, an informer's `Handler`; `on_change` hears every change of a
    namespace's labels (and its coming and going), `on_relisted` every full list."""

    def __init__(
        self,
        api: Lister | None,
        on_change: OnChange | None = None,
        on_relisted: Callable[[], None] | None = None,
        *,
        page_size: int = 500,
        relist_period: float | None = None,
    ) -> None:
        self._labels: dict[str, Mapping[str, str]] = {}
        # moves with every change of the table: a selection taken at a version holds until then
        self.version = 0
        self._on_change = on_change
        self._on_relisted = on_relisted
        # the list or watch failed and has not been listed again since: what is held may be
        # stale (a reader that must not act on stale labels refuses meanwhile)
        self.stale = False
        self.informer = Informer(
            NAMESPACES,
            self,
            api,
            page_size=page_size,
            relist_period=relist_period,
            on_error=self._failed,
            name="namespaces",
        )
        self.synced = self.informer.synced

    def get(self, name: str) -> Mapping[str, str] | None:
        """The namespace's labels; None when it has not been seen (or is deleted)."""
        return self._labels.get(name)

    def table(self) -> Mapping[str, Mapping[str, str]]:
        """Every namespace seen, with its labels (read-only: do not keep it across awaits)."""
        return self._labels

    async def run(self) -> None:
        await self.informer.run()

    # ---- informer.Handler ------------------------------------------------------------------

    def added(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        labels = meta.get("labels") or {}
        if not name or not isinstance(labels, Mapping):
            return
        before = self._labels.get(name)
        after = {str(k): str(v) for k, v in labels.items()}
        self._labels[name] = after
        if before != after:
            self.version += 1
            if self._on_change is not None:
                self._on_change(name, before, after)

    modified = added

    def deleted(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        before = self._labels.pop(name, None)
        if before is not None:
            self.version += 1
            if self._on_change is not None:
                self._on_change(name, before, None)

    def _failed(self, _: BaseException) -> None:
        self.stale = True

    def relisted(self, resource_version: int) -> None:
        self.stale = False
        if self._on_relisted is not None:
            self._on_relisted()
