"""Run karmadaquota itself against the test bed: the webhook and the controller as real
processes (real HTTPS, real ValidatingWebhookConfiguration), plus the CRD.

Shared by the e2e suites and the benchmarks.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from e2e.testbed import TestBed
from e2e.testbed.ports import free_port, is_listening

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "api" / "crds" / "quota.karmada.io_karmadaquotas.yaml"
CLUSTER_CRD = REPO / "api" / "crds" / "quota.karmada.io_clusterkarmadaquotas.yaml"
APPLIED_CRD = REPO / "api" / "crds" / "quota.karmada.io_appliedclusterkarmadaquotas.yaml"
VWC_MANIFEST = REPO / "webhook" / "karmada" / "validatingwebhookconfiguration.yaml"
MWC_MANIFEST = REPO / "webhook" / "karmada" / "mutatingwebhookconfiguration.yaml"
WEBHOOK_NAME = "karmadaquota"
BINDING_RULES = [
    {
        "apiGroups": ["work.karmada.io"],
        "apiVersions": ["v1alpha2"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["resourcebindings"],
        "scope": "Namespaced",
    }
]
QUOTA_RULES = [
    {
        "apiGroups": ["quota.karmada.io"],
        "apiVersions": ["v1alpha1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["karmadaquotas"],
        "scope": "Namespaced",
    },
    {
        "apiGroups": ["quota.karmada.io"],
        "apiVersions": ["v1alpha1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["clusterkarmadaquotas"],
        "scope": "Cluster",
    },
]


def install_crd(bed: TestBed) -> None:
    """The CRDs: KarmadaQuota, ClusterKarmadaQuota and its tenants' view."""
    for crd in (CRD, CLUSTER_CRD, APPLIED_CRD):
        bed.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    bed.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/karmadaquotas.quota.karmada.io",
        "crd/clusterkarmadaquotas.quota.karmada.io",
        "crd/appliedclusterkarmadaquotas.quota.karmada.io",
    )


@dataclass
class Proc:
    """A karmadaquota process with its log file; stopped with SIGTERM then SIGKILL."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self, sig: int = signal.SIGTERM, grace: float = 10.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def start(
    bed: TestBed,
    name: str,
    args: Sequence[str],
    env: dict[str, str] | None = None,
    detach: bool = False,
) -> Proc:
    """Run `karmadaquota <args>`; `detach` lets it outlive this process (`make up`)."""
    logs = bed.home.root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    out = log.open("ab")
    popen = subprocess.Popen(
        [sys.executable, "-m", "karmadaquota.cli", *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        cwd=REPO,
        start_new_session=detach,
    )
    out.close()
    return Proc(name, popen, log)


@dataclass
class WebhookProc:
    proc: Proc
    port: int
    ca_bundle: bytes
    metrics_port: int | None = None  # the plain-HTTP /metrics listener (--metrics-port)

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_bundle.decode())

    async def metrics(self) -> str:
        """/metrics from the plain-HTTP metrics port (what Prometheus scrapes), else HTTPS."""
        ctx: ssl.SSLContext | bool = True  # plain HTTP: not used
        if self.metrics_port is not None:
            url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        else:
            url, ctx = f"{self.base}/metrics", self.ssl_context()
        async with aiohttp.ClientSession() as s, s.get(url, ssl=ctx) as r:
            r.raise_for_status()
            return await r.text()


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition as `name{labels}` -> value (unlabelled: `name`)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


async def controller_metrics(port: int, timeout: float = 30.0) -> dict[str, float]:
    """A controller's /metrics. The deadline is generous: on a contended bed the process can
    take seconds to be scheduled, and a slow answer is not what the tests measure."""
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s,
        s.get(f"http://127.0.0.1:{port}/metrics") as r,
    ):
        return parse_metrics(await r.text())


async def wait_ready(url: str, ctx: ssl.SSLContext, proc: Proc, timeout: float = 60) -> None:
    """Poll `url` until 200; fail with the process's log when it dies or the deadline passes."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while True:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with s.get(url, ssl=ctx, timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{proc.name} not ready at {url}:\n{proc.tail()}")
            await asyncio.sleep(0.2)


async def start_webhook(
    bed: TestBed,
    name: str,
    ttl: str = "60s",
    detach: bool = False,
    *extra: str,
    port: int | None = None,
    env: dict[str, str] | None = None,
    log_level: str = "info",
) -> WebhookProc:
    """Start a webhook replica; `port` restarts one where it was (behind a proxy); `env` adds
    to its environment (e.g. the test-only clock offset); `log_level="debug"` logs every
    decision, allowed ones too (`decisions` counts them)."""
    cert = bed.serving_cert(name)
    port = port or free_port()
    metrics_port = free_port()
    proc = start(
        bed,
        name,
        [
            f"--log-level={log_level}",
            "webhook",
            f"--kubeconfig={bed.karmada_kubeconfig}",
            f"--tls-cert-file={cert.cert}",
            f"--tls-private-key-file={cert.key}",
            "--bind-address=127.0.0.1",
            f"--port={port}",
            "--metrics-bind-address=127.0.0.1",
            f"--metrics-port={metrics_port}",
            f"--reservation-ttl={ttl}",
            # stop at once: the bed's replicas sit behind no Service (the install tests run
            # the rendered default and check the drain)
            "--shutdown-delay=0s",
            *extra,
        ],
        env=env,
        detach=detach,
    )
    hook = WebhookProc(proc, port, cert.ca_bundle, metrics_port)
    try:
        await wait_ready(f"{hook.base}/readyz", hook.ssl_context(), proc)
    except BaseException:
        proc.stop()
        raise
    return hook


def decisions(hook: WebhookProc, namespace: str, binding: str = "") -> int:
    """The binding reviews of `namespace` (of the binding named `binding`, if given) the
    replica has answered, from its decision log (every one is logged at debug level, before
    the answer is sent; stderr is line-buffered)."""
    want = [' msg="admission decision" ', f" namespace={namespace} "]
    if binding:
        want.append(f" binding={binding} ")
    text = hook.proc.log.read_text(errors="replace")
    return sum(1 for line in text.splitlines() if all(w in f" {line} " for w in want))


def shipped_webhook(name: str) -> dict[str, Any]:
    """A webhook entry of webhook/karmada/'s ValidatingWebhookConfiguration as shipped."""
    doc = yaml.safe_load(VWC_MANIFEST.read_text())
    hook: dict[str, Any] = next(w for w in doc["webhooks"] if w["name"] == name)
    return hook


def shipped_binding_webhook() -> dict[str, Any]:
    """The ResourceBinding webhook entry as shipped (its namespaceSelector and matchConditions
    are registered on the bed as they are: every e2e test runs through them)."""
    return shipped_webhook("resourcebinding.quota.karmada.io")


def register(
    bed: TestBed,
    url_base: str,
    ca_bundle: bytes,
    skip: Sequence[dict[str, Any]] = (),
) -> None:
    """Register the webhook the way webhook/karmada/ does, but at a local URL; `skip` adds
    namespaceSelector expressions for bindings (e.g. a benchmark's namespaces without it).
    The queueing (mutating) registration goes first: karmada-apiserver takes a moment to start
    calling a new registration, and a binding created in between is refused, not queued."""
    register_queue(bed, url_base, ca_bundle)
    extra: dict[str, Any] = {
        "matchPolicy": "Equivalent",
        "name": "resourcebinding.quota.karmada.io",
        "matchConditions": shipped_binding_webhook()["matchConditions"],
    }
    selector = dict(shipped_binding_webhook()["namespaceSelector"])
    if skip:
        selector["matchExpressions"] = [*selector.get("matchExpressions", []), *skip]
    extra["namespaceSelector"] = selector
    bed.register_validating_webhook(
        f"{WEBHOOK_NAME}-bindings",
        f"{url_base}/validate-resourcebinding",
        ca_bundle,
        BINDING_RULES,
        side_effects="NoneOnDryRun",
        extra=extra,
    )
    bed.register_validating_webhook(
        f"{WEBHOOK_NAME}-quotas",
        f"{url_base}/validate-karmadaquota",
        ca_bundle,
        QUOTA_RULES,
        extra={"name": "karmadaquota.quota.karmada.io"},
    )
    overrides = shipped_webhook("overridepolicy.quota.karmada.io")
    bed.register_validating_webhook(
        f"{WEBHOOK_NAME}-overrides",
        f"{url_base}/validate-overridepolicy",
        ca_bundle,
        overrides["rules"],
        extra={"name": overrides["name"], "namespaceSelector": overrides["namespaceSelector"]},
    )
    templates = shipped_webhook("template.quota.karmada.io")
    bed.register_validating_webhook(
        f"{WEBHOOK_NAME}-templates",
        f"{url_base}/validate-template",
        ca_bundle,
        templates["rules"],
        extra={
            k: templates[k] for k in ("name", "namespaceSelector", "matchConditions", "sideEffects")
        },
    )


def shipped_queue_webhook() -> dict[str, Any]:
    """The queueing (mutating) webhook entry of webhook/karmada/ as shipped."""
    doc = yaml.safe_load(MWC_MANIFEST.read_text())
    (hook,) = doc["webhooks"]
    return dict(hook)


def register_queue(bed: TestBed, url_base: str, ca_bundle: bytes) -> None:
    """Register the queueing webhook as webhook/karmada/ does, at a local URL."""
    hook = shipped_queue_webhook()
    hook["clientConfig"] = {
        "url": f"{url_base}/mutate-resourcebinding",
        "caBundle": base64.b64encode(ca_bundle).decode(),
    }
    bed.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": f"{WEBHOOK_NAME}-queue"},
            "webhooks": [hook],
        }
    )


def unregister(bed: TestBed) -> None:
    bed.unregister_validating_webhook(f"{WEBHOOK_NAME}-bindings")
    bed.unregister_validating_webhook(f"{WEBHOOK_NAME}-quotas")
    bed.unregister_validating_webhook(f"{WEBHOOK_NAME}-overrides")
    bed.unregister_validating_webhook(f"{WEBHOOK_NAME}-templates")
    bed.kubectl(
        "delete", "mutatingwebhookconfiguration", f"{WEBHOOK_NAME}-queue", "--ignore-not-found"
    )


def start_controller(
    bed: TestBed,
    name: str = "controller",
    *extra: str,
    detach: bool = False,
    env: dict[str, str] | None = None,
    kubeconfig: Path | None = None,
) -> tuple[Proc, int]:
    """A controller; `kubeconfig` instead of the bed's (e.g. through `tcp_proxy`)."""
    port = free_port()
    proc = start(
        bed,
        name,
        [
            "controller",
            f"--kubeconfig={kubeconfig or bed.karmada_kubeconfig}",
            "--metrics-bind-address=127.0.0.1",
            f"--metrics-port={port}",
            *extra,
        ],
        env=env,
        detach=detach,
    )
    return proc, port


@contextlib.contextmanager
def round_robin_proxy(bed: TestBed, backends: Sequence[int]) -> Iterator[int]:
    """A separate L4 round-robin proxy process in front of webhook replicas (a Service)."""
    with tcp_proxy(bed, backends) as (port, _):
        yield port


@contextlib.contextmanager
def tcp_proxy(
    bed: TestBed, backends: Sequence[int], name: str = "tcpproxy"
) -> Iterator[tuple[int, Proc]]:
    """An L4 proxy process (e2e/testbed/tcpproxy.py); its port and its process (SIGSTOP it and
    every connection through it stalls, as a partition does)."""
    port = free_port()
    logs = bed.home.root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / f"{name}.log").open("ab") as out:
        popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "e2e.testbed.tcpproxy",
                f"--port={port}",
                *(f"--backend={b}" for b in backends),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    proc = Proc(name, popen, logs / f"{name}.log")
    try:
        deadline = time.monotonic() + 10
        while not is_listening(port):
            if popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tcpproxy did not start:\n{proc.tail()}")
            time.sleep(0.05)  # polling a port with a deadline
        yield port, proc
    finally:
        proc.stop()


def quota(namespace: str, name: str, hard: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": hard, **spec},
    }


@contextlib.contextmanager
def stopping(*procs: Proc) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            p.stop()
