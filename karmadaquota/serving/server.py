"""The listeners of both programs, hardened against hostile clients.

An admission webhook that stops answering makes the API server fail every binding write
(failurePolicy: Fail), so a client that merely holds connections open must not be able to
starve it; nor the kubelet's probes of the health and metrics ports (`serve` without a TLS
context: the controller's /healthz+/metrics port and the webhook's plain /metrics port, with
limits of their own, `AUX_LIMITS`). Bounds, all enforced here rather than left to library
defaults that vary by version:

* TLS 1.2 or newer only (`tls_context`), and no session tickets: karmada-apiserver's webhook
  client keeps no session cache, so a ticket is never used to resume, and issuing one cost
  about a sixth of our side of every handshake (docs/benchmarks.md, issue 36);
* a POST without Content-Length (a chunked body) is refused with 411 before a byte of it is
  read: the API server always declares the length, and a body of unknown size would have to be
  buffered to find out;
* a request body over `MAX_BODY_BYTES` is refused with 413 before a byte of it is read (the
  AdmissionReview of the largest object etcd stores is ~1.5 MiB, plus its oldObject);
* the TLS handshake, the request line and headers (counted from the connection's opening or
  from its previous response) and the body must each arrive within `read_timeout`; a slow
  connection is closed, a slow body gets 408;
* at most `max_connections` connections are served at once; beyond it a new connection is
  closed at once instead of queueing behind the slow ones.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger("karmadaquota.webhook.server")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# The application's client_max_size (aiohttp answers 413 once a body passes it).
MAX_BODY_BYTES = 3 * 1024 * 1024


@dataclass(frozen=True)
class ServerConfig:
    read_timeout: float = 10.0
    max_connections: int = 1000
    backlog: int = 1024


# The health and metrics ports: a scrape or a probe every few seconds, never a thousand clients.
AUX_LIMITS = ServerConfig(read_timeout=5.0, max_connections=64, backlog=128)


def tls_context(cert_file: str, key_file: str, client_ca_file: str | None = None) -> ssl.SSLContext:
    """A server context that refuses TLS 1.0 and 1.1 (as Kubernetes' own servers do); with
    `client_ca_file`, also every client without a certificate that CA signed (the handshake
    fails: a forged review is never read)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # TLS 1.3 sends two tickets after every handshake by default (TLS 1.2 one); client-go's
    # transport sets no ClientSessionCache and discards them
    ctx.num_tickets = 0
    ctx.options |= ssl.OP_NO_TICKET
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        ctx.load_verify_locations(client_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class _Refused(asyncio.Protocol):
    """Closes a connection over the limit as soon as it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class ConnectionGuard:
    """Protocol factory around aiohttp's: enforces the connection limit and the header deadline.

    A connection must start a request within `read_timeout` of opening or of finishing its
    previous one (which also closes idle keep-alive connections after that long). A request
    being handled is never cut: its body has its own deadline (`middleware`).
    """

    def __init__(
        self, limits: ServerConfig, on_connection: Callable[[str], None] | None = None
    ) -> None:
        self.server: web.Server | None = None  # aiohttp's factory, once the runner is set up
        self._limits = limits
        # "opened", "refused", "timed_out": the API server opens a TLS connection (a handshake,
        # our costliest step) for each review it sends beyond the idle connections it keeps
        self._on_connection = on_connection or (lambda _event: None)
        # handler -> requests it has started; dropped at its first deadline after it closed
        self._started: dict[RequestHandler, int] = {}
        self._busy: set[RequestHandler] = set()
        # handlers made but not connected yet: a TLS handshake under way, or accepted in the
        # same loop turn (aiohttp counts a connection only from connection_made, so a burst
        # accepted at once, or a flood of handshakes, would all pass a cap on its count alone)
        self._connecting: set[RequestHandler] = set()
        self.refused = 0
        self.timed_out = 0

    def __call__(self) -> asyncio.BaseProtocol:
        assert self.server is not None, "ConnectionGuard.server is set before serving"
        if self._open(self.server) >= self._limits.max_connections:
            self.refused += 1
            self._on_connection("refused")
            return _Refused()
        self._on_connection("opened")
        handler = self.server()
        self._connecting.add(handler)
        self._started[handler] = 0
        self._arm(handler)
        return handler

    def _open(self, server: web.Server) -> int:
        """Connections held: aiohttp's plus those not connected yet (one that connected and
        closed before this look stays counted until its deadline: stricter, never looser)."""
        connected = set(server.connections)
        self._connecting = {
            h for h in self._connecting if h.transport is None and h not in connected
        }
        return len(connected) + len(self._connecting)

    def _arm(self, handler: RequestHandler) -> None:
        count = self._started.get(handler, 0)
        loop = asyncio.get_running_loop()
        loop.call_later(self._limits.read_timeout, self._expire, handler, count)

    def _expire(self, handler: RequestHandler, count: int) -> None:
        if handler in self._busy or self._started.get(handler) != count:
            return  # working, or it started a request since (re-armed when that is done)
        if handler.transport is not None:
            self.timed_out += 1
            self._on_connection("timed_out")
        # also when not connected yet (TLS handshake pending): it then closes at once
        handler.force_close()
        self._started.pop(handler, None)
        self._connecting.discard(handler)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        proto = request.protocol
        self._started[proto] = self._started.get(proto, 0) + 1
        self._busy.add(proto)
        try:
            if request.method == "POST" and request.content_length is None:
                # A body of unknown length (chunked) would be buffered before its size is known;
                # the API server always declares it, so only a hostile client lands here.
                raise web.HTTPLengthRequired(text="Content-Length required\n")
            if (request.content_length or 0) > MAX_BODY_BYTES:  # refused before reading a byte
                raise web.HTTPRequestEntityTooLarge(MAX_BODY_BYTES, request.content_length or 0)
            try:
                async with asyncio.timeout(self._limits.read_timeout):
                    await request.read()  # cached: the handler's own read() returns it
            except TimeoutError:
                raise web.HTTPRequestTimeout(text="request body not received in time\n") from None
            return await handler(request)
        finally:
            self._busy.discard(proto)
            self._arm(proto)


@dataclass
class Listener:
    runner: web.AppRunner
    server: asyncio.Server
    guard: ConnectionGuard

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        self.server.close()
        await self.runner.cleanup()


async def serve(
    app: web.Application,
    host: str,
    port: int,
    ctx: ssl.SSLContext | None,
    limits: ServerConfig | None = None,
    on_connection: Callable[[str], None] | None = None,
) -> Listener:
    """Serve `app` on host:port (0 picks a free port) within `limits`: over HTTPS with `ctx`,
    plain HTTP without (the health and metrics ports)."""
    limits = limits or ServerConfig()
    guard = ConnectionGuard(limits, on_connection)
    app.middlewares.append(guard.middleware)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    guard.server = runner.server
    server = await asyncio.get_running_loop().create_server(
        guard,
        host,
        port,
        ssl=ctx,
        backlog=limits.backlog,
        ssl_handshake_timeout=limits.read_timeout if ctx is not None else None,
        reuse_address=True,
    )
    return Listener(runner, server, guard)
