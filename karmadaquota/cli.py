"""`karmadaquota` command line: `webhook` and `controller` entry points."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from karmadaquota import logs
from karmadaquota.durations import duration

if TYPE_CHECKING:
    from karmadaquota.webhook.config import WebhookConfig

log = logging.getLogger("karmadaquota.webhook")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _checked(text: str, parse: Callable[[], object]) -> str:
    """`text` when `parse()` reads it; else argparse's error with the parser's message."""
    try:
        parse()
    except ValueError as e:  # InvalidPattern among them
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def workload_kind(text: str) -> str:
    """A `--workload-kind` value, checked when the flags are parsed."""
    from karmadaquota.kinds import Kinds

    return _checked(text, lambda: Kinds.of([text]))


def podless_kind(text: str) -> str:
    """A `--podless-kind` value, checked when the flags are parsed."""
    from karmadaquota.kinds import Kinds

    return _checked(text, lambda: Kinds.of([], [text]))


def _evicted_grace_flag(p: argparse.ArgumentParser) -> None:
    """Both programs release evicted replicas on the same rule: each takes the flag."""
    p.add_argument(
        "--evicted-cluster-grace",
        type=duration,
        default=timedelta(0),
        help="a quota with spec.failover.evictedReplicas Release (the default) stops charging "
        "the replicas Karmada evicted from a cluster once that cluster has not been Ready this "
        "long (docs/charging.md, Failover); give the webhook and the controller the same value",
    )


def _workload_kind_flag(p: argparse.ArgumentParser) -> None:
    """Both programs charge with the same kinds: each takes the flag."""
    p.add_argument(
        "--workload-kind",
        action="append",
        default=[],
        type=workload_kind,
        metavar="APIVERSION/KIND=RESOURCE:REPLICAS_PATH:POD_TEMPLATE_PATH",
        help="charge this kind's pods from its replicas and pod template paths (as Karmada's "
        "resource interpreter customization reads them), e.g. "
        "apps.kruise.io/v1alpha1/CloneSet=clonesets:spec.replicas:spec.template; a kind "
        "neither declared nor known (docs/charging.md) is refused by quotas tracking pods or "
        "compute unless the members enforce them; grant get, list and watch on it",
    )
    p.add_argument(
        "--podless-kind",
        action="append",
        default=[],
        type=podless_kind,
        metavar="APIVERSION/KIND",
        help="a kind that runs no pods (charged its own object, never replicas), e.g. "
        "example.io/v1/Dashboard; a kind neither declared nor known (docs/charging.md) is "
        "refused by quotas tracking pods or compute unless the members enforce them",
    )


def wake_kind(text: str) -> str:
    """A `--wake-kind` value, checked when the flags are parsed."""
    from karmadaquota.controller.wake import Kind

    return _checked(text, lambda: Kind.parse(text))


def override_path(text: str) -> str:
    """An `--override-allowed-path` value, checked when the flags are parsed."""
    from karmadaquota.overrides import AllowList

    return _checked(text, lambda: AllowList.extended([text]))


class _DeprecatedAlias(argparse.Action):
    """A hidden old spelling of a flag: stores into the new flag's dest as the new flag would
    (appends for a repeatable one, else stores `const`), and is noted in `deprecated_flags`
    as (old, new) so that start-up warns once about it (`warn_deprecated`)."""

    def __init__(
        self,
        option_strings: list[str],
        dest: str,
        *,
        instead: str,
        append: bool = False,
        **kwargs: Any,
    ) -> None:
        self.instead = instead
        self.append = append
        if not append:
            kwargs.setdefault("nargs", 0)
            kwargs.setdefault("const", True)
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if self.append:
            setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), values])
        else:
            setattr(namespace, self.dest, self.const)
        used = getattr(namespace, "deprecated_flags", ())
        if option_string is not None and (option_string, self.instead) not in used:
            namespace.deprecated_flags = (*used, (option_string, self.instead))


def warn_deprecated(args: argparse.Namespace) -> None:
    """One warning per deprecated flag given (however often it was repeated)."""
    for old, new in getattr(args, "deprecated_flags", ()):
        logging.getLogger("karmadaquota.cli").warning(
            "deprecated flag", extra={"flag": old, "use": new}
        )


def _aux_flags(p: argparse.ArgumentParser) -> None:
    """The health and metrics port's flags, the same for both programs (docs/security.md)."""
    p.add_argument(
        "--metrics-auth",
        choices=("tokenreview", "none"),
        default="none",
        help="tokenreview: /metrics needs a bearer token that the API server of "
        "--metrics-auth-kubeconfig authenticates and authorizes for get /metrics (401/403 "
        "otherwise); none: /metrics answers clients on 127.0.0.1 only",
    )
    p.add_argument(
        "--metrics-auth-kubeconfig",
        help="kubeconfig of the API server that reviews /metrics tokens (default: in-cluster)",
    )
    p.add_argument(
        "--metrics-read-timeout",
        type=duration,
        default=timedelta(seconds=5),
        help="health/metrics port: request headers must arrive within it (idle ones closed)",
    )
    p.add_argument(
        "--metrics-max-connections",
        type=positive_int,
        default=64,
        help="health/metrics port: connections served at once; more are closed at once",
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="karmadaquota", description=__doc__)
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--log-level", default="info")
    sub = p.add_subparsers(dest="command", required=True)

    w = sub.add_parser("webhook", help="serve the admission webhook over HTTPS")
    w.add_argument("--kubeconfig", help="Karmada API server kubeconfig (default: in-cluster)")
    w.add_argument("--tls-cert-file", required=True)
    w.add_argument("--tls-private-key-file", required=True)
    w.add_argument("--bind-address", default="127.0.0.1")
    w.add_argument("--port", type=int, default=8443)
    w.add_argument(
        "--metrics-bind-address",
        default="127.0.0.1",
        help="address of the plain-HTTP /metrics listener (/metrics stays on the HTTPS port too)",
    )
    w.add_argument(
        "--metrics-port", type=int, default=8081, help="port of the plain-HTTP /metrics listener"
    )
    w.add_argument(
        "--client-ca-file",
        help="require a client certificate signed by this CA on the HTTPS port (refused at "
        "TLS otherwise): karmada-apiserver's AdmissionConfiguration gives it one "
        "(docs/security.md); the probes use the metrics port",
    )
    _aux_flags(w)
    w.add_argument("--reservation-ttl", type=duration, default=timedelta(seconds=60))
    w.add_argument(
        "--shutdown-delay",
        type=duration,
        default=timedelta(seconds=5),
        help="after SIGTERM, keep answering reviews this long with /readyz failing, so that "
        "endpoints and karmada-apiserver move to the other replicas first (0s: stop at once)",
    )
    w.add_argument("--limited-resources", help="ResourceQuotaConfiguration YAML file")
    w.add_argument(
        "--no-waiting-list",
        action="store_true",
        help="do not record workloads refused for quota in status.waiting (nothing to wake)",
    )
    w.add_argument(
        "--max-reservation-bytes",
        type=int,
        default=512 * 1024,
        help="bound on one quota's pending reservations (JSON bytes); over it: 429, try again",
    )
    w.add_argument(
        "--trusted-user",
        action="append",
        default=[],
        metavar="NAME",
        help="a user that may create ResourceBindings and change their spec in a namespace "
        "with a quota (repeat or comma-separate; a trailing * matches a prefix, e.g. "
        "system:serviceaccount:karmada-system:*; default: the controller's ServiceAccount "
        "system:serviceaccount:karmada-system:karmadaquota-controller; giving any replaces it); "
        "docs/security.md",
    )
    w.add_argument(
        "--trusted-group",
        action="append",
        default=[],
        metavar="NAME",
        help="a group whose members may do so (default: system:masters; giving any replaces it)",
    )
    w.add_argument(
        "--override-allowed-path",
        action="append",
        default=[],
        type=override_path,
        metavar="JSON_POINTER",
        help="a plaintext override path an untrusted writer may write in a namespace with a "
        "quota, besides the default allow-list (it and everything beneath it; `*` stands for "
        "any one token, e.g. /spec/template/spec/containers/*/workingDir; repeat or "
        "comma-separate); docs/security.md",
    )
    _workload_kind_flag(w)
    _evicted_grace_flag(w)
    w.add_argument("--max-connections", type=int, default=1000)
    w.add_argument(
        "--read-timeout",
        type=duration,
        default=timedelta(seconds=10),
        help="TLS handshake, request headers and body must each arrive within it",
    )
    w.add_argument(
        "--event-loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="asyncio (the default) or uvloop, if installed (no measured gain: docs/benchmarks.md)",
    )

    c = sub.add_parser("controller", help="run the aggregating quota controller")
    c.add_argument("--kubeconfig", help="Karmada API server kubeconfig (default: in-cluster)")
    c.add_argument("--resync-period", type=duration, default=timedelta(minutes=5))
    c.add_argument(
        "--admission-window",
        type=duration,
        help="how long a binding create may still be stored after karmadaquota admitted it "
        "(default 15s): at least the longest timeoutSeconds of any other validating webhook on "
        "resourcebindings, plus the write; a reservation whose binding's name is free is "
        "released only after it",
    )
    c.add_argument(
        "--recompute-concurrency",
        type=int,
        default=48,
        help="namespaces (and cluster quotas) recomputed and written at once; bounds the status "
        "writes in flight after a restart (default 48: a cold start waits on the API server, "
        "docs/benchmarks.md, issue 37)",
    )
    c.add_argument("--metrics-bind-address", default="127.0.0.1")
    c.add_argument("--metrics-port", type=int, default=8080)
    _aux_flags(c)
    c.add_argument("--namespace", default="karmada-system", help="namespace of the leader Lease")
    _workload_kind_flag(c)
    _evicted_grace_flag(c)
    c.add_argument("--no-member-watch", action="store_true", help="skip member-cluster pods")
    c.add_argument(
        "--no-tenant-views",
        action="store_true",
        help="keep no AppliedClusterKarmadaQuota in the namespaces a cluster quota selects",
    )
    c.add_argument(
        "--no-wake",
        action="store_true",
        help="never patch resource templates: refused workloads wait on Karmada's own backoff",
    )
    c.add_argument(
        "--wake-kind",
        action="append",
        default=[],
        type=wake_kind,
        metavar="GROUP/KIND[=RESOURCE]",
        help="also wake templates of this kind (besides apps/Deployment and "
        "apps/StatefulSet); grant the controller get and patch on it",
    )
    # deprecated spellings of the two above: hidden, and a warning at start-up
    c.add_argument(
        "--no-requeue", action=_DeprecatedAlias, dest="no_wake", default=False, instead="--no-wake"
    )
    c.add_argument(
        "--requeue-kind",
        action=_DeprecatedAlias,
        dest="wake_kind",
        default=[],
        type=wake_kind,
        instead="--wake-kind",
        append=True,
    )

    from karmadaquota.install import add_parser as add_install_parser

    add_install_parser(sub)  # `install apply|delete`: the Helm chart's hook Jobs
    return p


def webhook_config(args: argparse.Namespace) -> WebhookConfig:
    from karmadaquota.kinds import Kinds
    from karmadaquota.overrides import AllowList
    from karmadaquota.serving import aux_port
    from karmadaquota.serving.server import ServerConfig
    from karmadaquota.trust import Writers
    from karmadaquota.webhook.config import WebhookConfig, load_limited

    return WebhookConfig(
        kubeconfig=args.kubeconfig,
        cert_file=args.tls_cert_file,
        key_file=args.tls_private_key_file,
        bind_address=args.bind_address,
        port=args.port,
        reservation_ttl=args.reservation_ttl,
        limited=load_limited(args.limited_resources) if args.limited_resources else [],
        max_reservation_bytes=args.max_reservation_bytes,
        record_waiting=not args.no_waiting_list,
        limits=ServerConfig(
            read_timeout=args.read_timeout.total_seconds(), max_connections=args.max_connections
        ),
        metrics_bind_address=args.metrics_bind_address,
        metrics_port=args.metrics_port,
        writers=Writers.of(args.trusted_user, args.trusted_group),
        allowed_overrides=AllowList.extended(args.override_allowed_path),
        client_ca_file=args.client_ca_file,
        metrics_auth=args.metrics_auth,
        metrics_auth_kubeconfig=args.metrics_auth_kubeconfig,
        aux_limits=aux_port.limits(args),
        kinds=Kinds.of(args.workload_kind, args.podless_kind),
        evicted_cluster_grace=args.evicted_cluster_grace.total_seconds(),
    )


async def _serve_webhook(args: argparse.Namespace) -> None:
    from karmadaquota.heap import freeze_startup_heap
    from karmadaquota.webhook.app import running

    config = webhook_config(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with running(config) as (webhook, _):
        freeze_startup_heap()
        await stop.wait()
        # keep answering while the Service's endpoints (and karmada-apiserver's connections)
        # move to the other replicas: /readyz fails from now on; a second signal ends it at once
        webhook.draining = True
        log.info("draining", extra={"seconds": args.shutdown_delay.total_seconds()})
        stop.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(args.shutdown_delay.total_seconds()):
                await stop.wait()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logs.setup(args.log_format, args.log_level)
    warn_deprecated(args)
    if args.command == "install":
        from karmadaquota.install import main as install_main

        return install_main(args)
    if args.command == "webhook":
        from karmadaquota.kube.client import CredentialsError
        from karmadaquota.webhook.config import ConfigError

        try:
            if args.event_loop == "uvloop":
                try:
                    import uvloop
                except ImportError:
                    print(
                        "karmadaquota webhook: --event-loop=uvloop: uvloop is not installed "
                        "(pip install uvloop)",
                        file=sys.stderr,
                    )
                    return 2
                uvloop.run(_serve_webhook(args))
            else:
                asyncio.run(_serve_webhook(args))
        except (ConfigError, CredentialsError) as e:
            print(f"karmadaquota webhook: {e}", file=sys.stderr)
            return 2
        return 0
    from karmadaquota.controller.main import run_controller

    return run_controller(args)


if __name__ == "__main__":
    sys.exit(main())
