"""`karmadaquota controller`: wire the pieces together and run until SIGTERM/SIGINT.

Flags come from cli.py (--kubeconfig, --resync-period, --admission-window,
--metrics-bind-address, --metrics-port, --metrics-auth[-kubeconfig], --metrics-read-timeout,
--metrics-max-connections, --namespace for the Lease, --no-member-watch,
--no-wake, --wake-kind). ReconcilerConfig that rarely changes is read from the environment:

| variable | default | meaning |
|---|---|---|
| KARMADAQUOTA_DEBOUNCE_QUIET | 0.03 | flush a namespace after this many quiet seconds |
| KARMADAQUOTA_DEBOUNCE_MAX | 0.1 | ... and at the latest this long after its first change |
| KARMADAQUOTA_FOLD_DELAY | 1.0 | a write that only counts pending charges as used waits this long |
| KARMADAQUOTA_LEADER_ELECT | true | false: write without a Lease (one replica only!) |
| KARMADAQUOTA_LEASE_NAME | karmadaquota-controller | the Lease's name |
| KARMADAQUOTA_LEASE_DURATION | 10 | seconds; renewals every 2 s, deadline duration - 3 s |
| KARMADAQUOTA_KOPF_LOG_LEVEL | warning | kopf's own logging |
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
from aiohttp import web

from karmadaquota.controller import operator
from karmadaquota.controller.dequeue import Dequeuer
from karmadaquota.controller.guard_keeper import GuardKeeper
from karmadaquota.controller.guard_works import GuardWorks
from karmadaquota.controller.leader import (
    DEFAULT_LEASE_NAME,
    AlwaysLeader,
    LeaderElector,
    identity,
)
from karmadaquota.controller.manager import Controller
from karmadaquota.controller.members import Members
from karmadaquota.controller.metrics import ControllerMetrics
from karmadaquota.controller.reconciler import DEFAULT_ADMISSION_WINDOW, ReconcilerConfig
from karmadaquota.controller.wake import DEFAULT_KINDS, WakeConfig, Waker, kinds
from karmadaquota.heap import freeze_startup_heap
from karmadaquota.kinds import BUILTIN, Kinds
from karmadaquota.kube.client import (
    JSON,
    POOL_LIMIT,
    CredentialsError,
    KubeClient,
    user_agent,
)
from karmadaquota.kube.templates import TemplateStore
from karmadaquota.loop_lag import watch_lag
from karmadaquota.serving import aux_port, metrics_auth, server
from karmadaquota.serving.aux_port import aux_app
from karmadaquota.serving.server import AUX_LIMITS, ServerConfig
from karmadaquota.trim import trim_every

log = logging.getLogger("karmadaquota.controller")

# seconds between two returns of freed heap to the system (karmadaquota.trim)
TRIM_PERIOD = 5.0


@dataclass
class ControllerConfig:
    kubeconfig: str | None = None
    # the recompute and its jobs (member watch, tenants' views, resync, debounce, ...)
    reconciler: ReconcilerConfig = field(default_factory=ReconcilerConfig)
    metrics_bind_address: str = "127.0.0.1"
    metrics_port: int = 8080
    lease_namespace: str = "karmada-system"
    leader_elect: bool = True
    lease_name: str = DEFAULT_LEASE_NAME
    lease_duration: float = 10.0
    kopf_log_level: str = "warning"
    # None: waking is off (refused workloads wait on Karmada's own backoff)
    wake: WakeConfig | None = field(default_factory=WakeConfig)
    # who may read /metrics (metrics_auth.authorizer) and the port's bounds
    metrics_auth: str = "none"
    metrics_auth_kubeconfig: str | None = None
    aux_limits: ServerConfig = AUX_LIMITS
    # the kinds the platform team declared besides the built-in ones (karmadaquota.kinds)
    workload_kinds: Kinds = BUILTIN


def _bool(text: str) -> bool:
    return text.strip().lower() not in ("0", "false", "no", "off", "")


def config_from(args: argparse.Namespace, env: Mapping[str, str]) -> ControllerConfig:
    return ControllerConfig(
        kubeconfig=args.kubeconfig,
        reconciler=ReconcilerConfig(
            resync_period=args.resync_period.total_seconds() or 300.0,
            admission_window=(
                args.admission_window.total_seconds()
                if args.admission_window is not None
                else DEFAULT_ADMISSION_WINDOW
            ),
            member_watch=not args.no_member_watch,
            evicted_cluster_grace=args.evicted_cluster_grace.total_seconds(),
            tenant_views=not args.no_tenant_views,
            quiet=float(env.get("KARMADAQUOTA_DEBOUNCE_QUIET", "0.03")),
            max_delay=float(env.get("KARMADAQUOTA_DEBOUNCE_MAX", "0.1")),
            fold_delay=float(env.get("KARMADAQUOTA_FOLD_DELAY", "1.0")),
            concurrency=args.recompute_concurrency,
        ),
        metrics_bind_address=args.metrics_bind_address,
        metrics_port=args.metrics_port,
        lease_namespace=args.namespace,
        leader_elect=_bool(env.get("KARMADAQUOTA_LEADER_ELECT", "true")),
        lease_name=env.get("KARMADAQUOTA_LEASE_NAME", DEFAULT_LEASE_NAME),
        lease_duration=float(env.get("KARMADAQUOTA_LEASE_DURATION", "10")),
        kopf_log_level=env.get("KARMADAQUOTA_KOPF_LOG_LEVEL", "warning"),
        wake=None if args.no_wake else WakeConfig(kinds=kinds([*DEFAULT_KINDS, *args.wake_kind])),
        metrics_auth=args.metrics_auth,
        metrics_auth_kubeconfig=args.metrics_auth_kubeconfig,
        aux_limits=aux_port.limits(args),
        workload_kinds=Kinds.of(args.workload_kind, args.podless_kind),
    )


def build_app(
    controller: Controller,
    metrics: ControllerMetrics,
    authorizer: metrics_auth.Authorizer | None = None,
) -> web.Application:
    """/healthz, /readyz (bindings and quotas listed) and /metrics (for whom `authorizer`
    allows; default: clients on 127.0.0.1)."""
    return aux_app(
        metrics.registry, authorizer or metrics_auth.LoopbackOnly(), controller.synced.is_set
    )


async def serve(config: ControllerConfig) -> int:
    metrics = ControllerMetrics()
    client = await KubeClient.connect(config.kubeconfig, user_agent=user_agent("controller"))

    async def read_secret(namespace: str, name: str) -> JSON:
        return await client.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")

    # Connection pools by job (`KubeClient.lane`; watches have one of their own): the Lease
    # renewals every write waits on, the quota status writes (with the enforcement label
    # each first write puts on), and the guard job's writes on karmada-apiserver (the quotas'
    # guard finalizers, a Pull-mode member's guard Works: up to a request per Pull member for
    # each of its queue's flushes) never wait for a connection behind the other jobs'
    # requests, nor take theirs. A Push member's guards and pods have that member's own
    # client (`members`): a slow member holds up no other.
    writes = client.lane(2 * config.reconciler.concurrency + 8)
    guard_writes = client.lane(POOL_LIMIT)  # as many as the other jobs share
    elector: LeaderElector | None = None
    if config.leader_elect:
        elector = LeaderElector(
            client.lane(2),  # used by the elector's thread alone (its loop's connections)
            config.lease_namespace,
            name=config.lease_name,
            lease_duration=config.lease_duration,
            renew_deadline=config.lease_duration - 3.0,
            retry_period=min(2.0, config.lease_duration / 5),
        )
    members = Members(
        read_secret,
        metrics=metrics,
        enabled=config.reconciler.member_watch,
        client_factory=functools.partial(
            KubeClient.from_token, user_agent=user_agent("controller")
        ),
    )
    # the guards are watched in every member and protected there by an admission policy where
    # the member allows it; a guard someone else changed is synced at once (the keeper's queue)
    # ... and a Pull-mode member's guard is a Work that karmada-agent applies there
    keeper = GuardKeeper(
        members, metrics, watch=True, carried=functools.partial(GuardWorks, guard_writes)
    )
    controller = Controller(
        client,
        metrics,
        elector or AlwaysLeader(),
        config.reconciler,
        members,
        waker=Waker(client, metrics, config.wake) if config.wake is not None else None,
        namespace_api=writes,
        dequeuer=Dequeuer(client, metrics),
        guards=keeper,
        templates=TemplateStore(client, kinds=config.workload_kinds),
        status_api=writes,
        guard_api=guard_writes,
    )
    # what the controller hears of: members and leadership (both built before it, and
    # started after)
    members.on_change = controller.member_changed
    if elector is not None:
        elector.on_change = controller.leadership_changed
    else:
        controller.leadership_changed(True)

    authorizer = metrics_auth.authorizer(config.metrics_auth, config.metrics_auth_kubeconfig)
    listener = await server.serve(
        build_app(controller, metrics, authorizer),
        config.metrics_bind_address,
        config.metrics_port,
        None,
        config.aux_limits,
    )
    freeze_startup_heap()
    log.info(
        "controller starting",
        extra={
            "metrics": f"{config.metrics_bind_address}:{config.metrics_port}",
            "metrics_auth": config.metrics_auth,
            "lease": f"{config.lease_namespace}/{config.lease_name}"
            if config.leader_elect
            else "off",
            "holder": elector.holder if elector else "",
            "member_watch": config.reconciler.member_watch,
            "wake": [f"{k.group}/{k.kind}" for k in config.wake.kinds] if config.wake else "off",
            "workload_kinds": [str(d) for d in config.workload_kinds.declared.values()],
            "podless_kinds": sorted(f"{g}/{k}" for g, k in config.workload_kinds.podless),
        },
    )
    tasks: list[asyncio.Task[Any]] = [
        asyncio.create_task(controller.run(), name="controller"),
        # what a cold start or a resync freed goes back to the system (docs/benchmarks.md)
        asyncio.create_task(trim_every(TRIM_PERIOD), name="heap-trim"),
        # how late the loop runs what is due: what a lapsed Lease is explained with
        asyncio.create_task(watch_lag(metrics.loop_lag.observe), name="loop-lag"),
    ]
    if elector is not None:
        # renewed from a thread of its own: a busy loop cannot lapse it (controller.leader);
        # cancelled, the thread releases the Lease
        tasks.append(asyncio.create_task(elector.run_on_thread(), name="leader-election"))
    logging.getLogger("kopf").setLevel(config.kopf_log_level.upper())
    code = 0
    try:
        await kopf.operator(
            registry=operator.registry(members, client, controller.readiness),
            settings=operator.settings(),
            standalone=True,
            clusterwide=True,
            # ours, not kopf's default: that calls getpass.getuser(), which raises for a uid
            # without a passwd entry (the image's 65532) and no USER/LOGNAME (a pod's env)
            identity=elector.holder if elector is not None else identity(),  # type: ignore[arg-type]
        )
    except Exception:
        log.exception("operator failed")
        code = 1
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await keeper.close()
        await members.close()
        await listener.close()
        await authorizer.close()
        await client.close()
        log.info("controller stopped")
    return code


def run_controller(args: argparse.Namespace) -> int:
    config = config_from(args, os.environ)
    with contextlib.suppress(KeyboardInterrupt):
        try:
            return asyncio.run(serve(config))
        except CredentialsError as e:
            print(f"karmadaquota controller: {e}", file=sys.stderr)
            return 2
    return 0
