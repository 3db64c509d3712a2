"""The hardened HTTPS listener: TLS 1.2+, body size limit, read deadlines, connection limit.

Real sockets and TLS on 127.0.0.1 (the listener is what is under test); the admission logic
behind it is the real app over the in-memory fake API.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import json
import ssl
import time
import warnings
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from karmadaquota.serving.server import MAX_BODY_BYTES, Listener, ServerConfig, serve, tls_context
from karmadaquota.webhook.batcher import Batcher
from karmadaquota.webhook.handlers import Webhook
from karmadaquota.webhook.metrics import WebhookMetrics
from karmadaquota.webhook.routes import build_app
from tests.fake_api import Replica, quota_doc
from tests.webhook.test_webhook_app import review
from tests.webhook_fakes import binding_doc

PATH = "/validate-resourcebinding"


def self_signed(directory: Path) -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_file), str(key_file)


class Served:
    def __init__(self, listener: Listener, cert_file: str, events: Counter[str]) -> None:
        self.listener = listener
        self.events = events  # what the listener reported to its on_connection callback
        self.client_ctx = ssl.create_default_context(cafile=cert_file)
        self.url = f"https://127.0.0.1:{listener.port}{PATH}"

    async def admit(self, timeout: float = 5.0) -> int:
        """One ordinary review; its status code, within the API server's webhook deadline."""
        body = json.dumps(review(binding_doc("ok", cpu="1"))).encode()
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s,
            s.post(self.url, data=body, ssl=self.client_ctx) as r,
        ):
            await r.read()
            return r.status

    async def open_raw(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(
            "127.0.0.1", self.listener.port, ssl=self.client_ctx, server_hostname="127.0.0.1"
        )


async def start(
    tmp_path: Path, limits: ServerConfig, events: Counter[str] | None = None
) -> tuple[Listener, str]:
    cert_file, key_file = self_signed(tmp_path)
    store = Replica(quota_doc(hard={"requests.cpu": "1000", "pods": "1000"}))
    cache = store.quota_store()
    app = build_app(Webhook(cache, Batcher(store), WebhookMetrics()))
    listener = await serve(
        app,
        "127.0.0.1",
        0,
        tls_context(cert_file, key_file),
        limits,
        None if events is None else lambda event: events.update([event]),
    )
    return listener, cert_file


@pytest.fixture
async def served(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Served]:
    limits = getattr(request, "param", ServerConfig(read_timeout=1.0, max_connections=400))
    events: Counter[str] = Counter()
    listener, cert_file = await start(tmp_path, limits, events)
    try:
        yield Served(listener, cert_file, events)
    finally:
        await listener.close()


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    """True when the server closes the connection (EOF or reset) within `within` seconds."""
    try:
        async with asyncio.timeout(within):
            return await reader.read(1024) == b""
    except TimeoutError:
        return False
    except (ConnectionError, ssl.SSLError):
        return True


def _pinned(version: ssl.TLSVersion) -> ssl.SSLContext:
    """A client speaking only `version`, verifying nothing: only the server can refuse it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLSVersion.TLSv1_1 is deprecated
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.minimum_version = ctx.maximum_version = version
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    return ctx


async def test_a_tls_1_1_client_is_refused_and_1_2_is_served(served: Served) -> None:
    # the port is open and serving: the same client speaking TLS 1.2 completes its handshake
    _, writer = await asyncio.open_connection(
        "127.0.0.1", served.listener.port, ssl=_pinned(ssl.TLSVersion.TLSv1_2)
    )
    writer.close()
    # at 1.1 the handshake is refused: an alert, or a reset mid-handshake (a closed port
    # would raise ConnectionRefusedError, neither of these)
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        await asyncio.open_connection(
            "127.0.0.1", served.listener.port, ssl=_pinned(ssl.TLSVersion.TLSv1_1)
        )
    assert await served.admit() == 200


def test_the_server_context_itself_sets_tls_1_2_as_minimum(tmp_path: Path) -> None:
    ctx = tls_context(*self_signed(tmp_path))
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def _ticket_after_a_round_trip(server: ssl.SSLContext, client: ssl.SSLContext) -> bool:
    """Handshake and one record each way in memory; whether the client then holds a session
    ticket it could resume with (TLS 1.3 tickets arrive after the handshake)."""
    bios = [ssl.MemoryBIO() for _ in range(4)]  # server in/out, client in/out
    s = server.wrap_bio(bios[0], bios[1], server_side=True)
    c = client.wrap_bio(bios[2], bios[3])
    for _ in range(8):
        for side in (c, s):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
            bios[0].write(bios[3].read())
            bios[2].write(bios[1].read())
    s.write(b"answer")
    bios[2].write(bios[1].read())
    assert c.read(64) == b"answer"
    return bool(c.session is not None and c.session.has_ticket)


@pytest.mark.parametrize(
    "version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2], ids=["tls1.3", "tls1.2"]
)
def test_no_session_ticket_is_issued(tmp_path: Path, version: ssl.TLSVersion) -> None:
    """karmada-apiserver never resumes a session (client-go keeps no session cache), so a
    ticket would be CPU spent on every new connection for nothing: none is sent. The same
    client against OpenSSL's defaults gets one (the check can fail)."""
    cert_file, key_file = self_signed(tmp_path)
    client = _pinned(version)
    assert not _ticket_after_a_round_trip(tls_context(cert_file, key_file), client)
    default = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    default.load_cert_chain(cert_file, key_file)
    assert _ticket_after_a_round_trip(default, _pinned(version))


async def test_a_body_over_the_limit_gets_413(served: Served) -> None:
    big = b'{"x": "' + b"a" * (MAX_BODY_BYTES + 1024) + b'"}'
    async with (
        aiohttp.ClientSession() as s,
        s.post(served.url, data=big, ssl=served.client_ctx) as r,
    ):
        assert r.status == 413
    assert await served.admit() == 200  # and it keeps serving


async def test_a_chunked_body_gets_411_before_it_is_read(served: Served) -> None:
    """A body of undeclared length is refused at its headers: nothing of it is buffered."""

    async def endless() -> AsyncIterator[bytes]:
        for _ in range(64):  # bounded: 64 MiB if the server kept reading
            yield b"x" * (1024 * 1024)

    async with (
        aiohttp.ClientSession() as s,
        s.post(served.url, data=endless(), ssl=served.client_ctx) as r,
    ):
        assert r.status == 411
        assert r.request_info.headers.get("Transfer-Encoding") == "chunked"
    assert await served.admit() == 200  # and it keeps serving


async def test_many_slow_connections_do_not_keep_an_ordinary_review_waiting(
    served: Served,
) -> None:
    """Slow-loris: 200 clients trickle a request header; a real review is answered at once,
    and the slow ones are cut at the read deadline."""
    slow: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    for _ in range(200):
        reader, writer = await served.open_raw()
        writer.write(f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".encode())
        await writer.drain()
        slow.append((reader, writer))
    started = time.monotonic()
    assert await served.admit(timeout=5.0) == 200
    answered_in = time.monotonic() - started
    for _, writer in slow:
        writer.write(b"a")  # still trickling: progress does not extend the deadline
    closed = await asyncio.gather(*(closed_by_server(r, within=10) for r, _ in slow))
    assert all(closed), f"{closed.count(False)} slow connections still open"
    assert served.listener.guard.timed_out >= 200
    assert served.events["timed_out"] == served.listener.guard.timed_out
    assert served.events["opened"] >= 201
    for _, writer in slow:
        writer.close()
    print(f"ordinary review answered in {answered_in:.3f}s beside 200 slow connections")


async def test_a_slow_body_gets_408(served: Served) -> None:
    reader, writer = await served.open_raw()
    writer.write(
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n{".encode()
    )
    await writer.drain()
    async with asyncio.timeout(10):
        status_line = await reader.readline()
    assert status_line.startswith(b"HTTP/1.1 408"), status_line
    writer.close()


@pytest.mark.parametrize(
    "served", [ServerConfig(read_timeout=30.0, max_connections=5)], indirect=True
)
async def test_connections_over_the_limit_are_closed_at_once_not_queued(served: Served) -> None:
    held = [await served.open_raw() for _ in range(5)]
    for _, writer in held:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # kept alive
    for reader, _ in held:
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
    reader, writer = await served.open_raw()
    assert await closed_by_server(reader, within=5)  # long before the 30 s read deadline
    assert served.listener.guard.refused >= 1
    assert served.events["refused"] == served.listener.guard.refused
    assert served.events["opened"] == 5  # the refused one is not counted as opened
    writer.close()
    held[0][1].close()

    async def room_again() -> int:
        deadline = time.monotonic() + 10
        while True:
            try:
                return await served.admit()
            except aiohttp.ClientError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)  # polling for the server to see the close

    assert await room_again() == 200
    for _, w in held[1:]:
        w.close()


async def test_connections_are_counted_once_each_not_per_review(served: Served) -> None:
    """`opened` counts TLS connections (handshakes): five reviews over one kept-alive
    connection are one; five clients are five."""
    body = json.dumps(review(binding_doc("ok", cpu="1"))).encode()
    async with aiohttp.ClientSession() as s:
        for _ in range(5):
            async with s.post(served.url, data=body, ssl=served.client_ctx) as r:
                assert r.status == 200
                await r.read()
    assert served.events["opened"] == 1
    for _ in range(4):
        assert await served.admit() == 200
    assert served.events["opened"] == 5
