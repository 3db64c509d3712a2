"""Events on a workload's resource template: what the controller tells the people who own it
(Queued, Admitted, Reclaimed). One POST per event, within 2 s, never retried: an event that is
not recorded is logged, and nothing waits on it."""

from __future__ import annotations

import logging
from datetime import datetime

from karmadaquota.kube.client import JSON, Api, KubeError
from karmadaquota.queueing import Template
from karmadaquota.times import format_time

log = logging.getLogger("karmadaquota.events")

COMPONENT = "karmadaquota-controller"


async def record(
    api: Api,
    namespace: str,
    template: Template,
    reason: str,
    message: str,
    now: datetime,
    warning: bool = False,
) -> None:
    """Post one Event on `template` (in `namespace`)."""
    stamp = format_time(now)
    body: JSON = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{template.name}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": template.api_version,
            "kind": template.kind,
            "name": template.name,
            "namespace": namespace,
            "uid": template.uid,
        },
        "reason": reason,
        "message": message,
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    try:
        await api.request("POST", f"/api/v1/namespaces/{namespace}/events", body, timeout=2.0)
    except (KubeError, TimeoutError, OSError) as err:
        log.warning(
            "event not recorded",
            extra={"namespace": namespace, "reason": reason, "error": str(err)},
        )
