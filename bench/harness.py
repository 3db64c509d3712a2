"""A benchmark's bed with karmadaquota installed: started, and always stopped, in one place."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from e2e.testbed import TestBed, product
from karmadaquota.kube.client import JSON, KubeClient, NotFound

# A namespace with this label is outside the webhook registration (its namespaceSelector
# skips it): Karmada with no webhook of ours, the limit the cost benchmark compares against.
NO_WEBHOOK_LABEL = "bench.karmadaquota.io/no-webhook"


@dataclass
class Installed:
    """The bed, our two processes on it (the webhook registered) and a client."""

    home: Path
    bed: TestBed
    controller: product.Proc
    controller_port: int
    hook: product.WebhookProc
    api: KubeClient

    async def controller_metrics(self) -> dict[str, float]:
        return await product.controller_metrics(self.controller_port)

    def restart_controller(self, name: str, *args: str) -> None:
        """Replace the controller, e.g. with other flags (stopped at the end like the first)."""
        self.controller.stop()
        self.controller, self.controller_port = product.start_controller(self.bed, name, *args)


@contextlib.asynccontextmanager
async def installed(
    webhook_args: Sequence[str] = (),
    karmada_apiserver_args: Sequence[str] = (),
    members: Sequence[str] = ("member1",),
) -> AsyncIterator[Installed]:
    """Member clusters (one by default), the CRD, a controller and a registered webhook; torn
    down on exit."""
    home = Path(tempfile.mkdtemp(prefix="karmadaquota-bench-"))
    bed = TestBed.start(
        home,
        list(members),
        ephemeral=True,
        quiet=True,
        karmada_apiserver_args=karmada_apiserver_args,
    )
    controller: product.Proc | None = None
    hook: product.WebhookProc | None = None
    run: Installed | None = None
    try:
        await asyncio.to_thread(product.install_crd, bed)
        controller, port = product.start_controller(bed, "bench-controller")
        hook = await product.start_webhook(bed, "bench-webhook", "60s", False, *webhook_args)
        skip = {"key": NO_WEBHOOK_LABEL, "operator": "DoesNotExist"}
        await asyncio.to_thread(product.register, bed, hook.base, hook.ca_bundle, [skip])
        api = await KubeClient.connect(str(bed.karmada_kubeconfig))
        run = Installed(home, bed, controller, port, hook, api)
        try:
            yield run
        finally:
            await api.close()
    finally:
        if hook is not None:
            await asyncio.to_thread(product.unregister, bed)
            hook.proc.stop()
        if run is not None:
            run.controller.stop()
        elif controller is not None:
            controller.stop()
        bed.stop()
        if os.environ.get("KARMADAQUOTA_BENCH_KEEP"):  # its logs and profiles/ stay for a look
            print(f"bed home kept: {home}", flush=True)
        else:
            shutil.rmtree(home, ignore_errors=True)


# ---- what the wake, queue and guards benches share ------------------------------------------

CPU = {"cpu": "100m"}
QUOTA = "/apis/quota.karmada.io/v1alpha1/namespaces/{ns}/karmadaquotas/team"
DEPLOYMENTS = "/apis/apps/v1/namespaces/{ns}/deployments"
BINDING = "/apis/work.karmada.io/v1alpha2/namespaces/{ns}/resourcebindings/{name}-deployment"


async def binding(api: KubeClient, ns: str, name: str) -> JSON | None:
    """A Deployment's ResourceBinding, or None while it does not exist."""
    try:
        return await api.get(BINDING.format(ns=ns, name=name))
    except NotFound:
        return None


def scheduled(rb: JSON | None) -> int:
    """Replicas the scheduler placed in member clusters."""
    if rb is None:
        return 0
    return sum(int(c.get("replicas", 0)) for c in rb["spec"].get("clusters") or [])


async def stopwatch(
    check: Callable[[], Awaitable[bool]], started: float, deadline: float = 1200
) -> float:
    """Seconds from `started` until `check` holds (polled every 10 ms)."""
    while not await check():
        if time.monotonic() - started > deadline:
            raise TimeoutError("not reached within the deadline")
        await asyncio.sleep(0.01)  # polling with a deadline
    return time.monotonic() - started
