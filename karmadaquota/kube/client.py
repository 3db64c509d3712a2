"""A thin async Kubernetes REST client on aiohttp, for the few calls the webhook makes.

kubernetes_asyncio loads the credentials (kubeconfig or in-cluster service account) — that is
the part worth a library. The requests themselves go through one pooled aiohttp session as
plain JSON: the quota hot path (GET, PUT status, WATCH) needs no generated models, and raw
dicts keep a status write to one serialisation. Bodies and watch events are encoded and decoded
with orjson, several times faster than the standard library on quota and binding objects (the
controller decodes every binding event; the webhook encodes every status write).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import orjson
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config import load_incluster_config, load_kube_config

JSON = dict[str, Any]


class KubeError(Exception):
    """An API error with the server's own status code, reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class Conflict(KubeError):
    """409: the object changed since it was read (compare-and-swap lost)."""


class NotFound(KubeError):
    """404: the object or its type does not exist."""


class Gone(KubeError):
    """410: the watch's resourceVersion is too old; list again."""


_ERRORS: dict[int, type[KubeError]] = {409: Conflict, 404: NotFound, 410: Gone}


class Api(Protocol):
    """What the controller needs of a client: `KubeClient`, or a fake in unit tests."""

    async def request(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> JSON: ...

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON: ...


def _error(status: int, body: str) -> KubeError:
    try:
        doc = orjson.loads(body)
        reason, message = str(doc.get("reason", "")), str(doc.get("message", body))
    except (ValueError, AttributeError):
        reason, message = "", body
    return _ERRORS.get(status, KubeError)(status, reason, message)


def _tls(
    cafile: str | None = None, cadata: str | None = None, insecure: bool = False
) -> ssl.SSLContext:
    """A client TLS context trusting `cafile`/`cadata` (else the system CAs)."""
    ctx = ssl.create_default_context(cafile=cafile, cadata=cadata)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _bearer(token: str) -> dict[str, str]:
    token = token.strip()
    return {"Authorization": f"Bearer {token}"} if token else {}


@dataclass(frozen=True)
class Credentials:
    """How a kubeconfig (or the in-cluster service account) says to reach the API server,
    loaded once and shared (the controller hands them to kopf's login as well)."""

    host: str
    ca_path: str | None = None
    insecure: bool = False
    scheme: str | None = None
    token: str | None = None
    cert_path: str | None = None
    key_path: str | None = None


async def load_credentials(
    kubeconfig: str | None = None, context: str | None = None
) -> Credentials:
    """From a kubeconfig file, or the in-cluster service account when none is given."""
    cfg = Configuration()
    if kubeconfig:
        await load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    else:
        load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    token = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken") or None
    scheme = None
    if token and " " in token:
        scheme, token = token.split(" ", 1)
    elif token:
        scheme = "Bearer"
    return Credentials(
        host=str(cfg.host),
        ca_path=cfg.ssl_ca_cert or None,
        insecure=not cfg.verify_ssl,
        scheme=scheme,
        token=token,
        cert_path=cfg.cert_file or None,
        key_path=cfg.key_file or None,
    )


class KubeClient:
    """JSON over HTTPS to one API server; create with `connect`, close with `close`."""

    def __init__(
        self,
        host: str,
        ssl_context: ssl.SSLContext,
        headers: Mapping[str, str],
        credentials: Credentials | None = None,
    ) -> None:
        self.credentials = credentials or Credentials(host)
        self.host = host.rstrip("/")
        self._ssl = ssl_context
        self._headers = {"Accept": "application/json", **headers}
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, context: str | None = None) -> KubeClient:
        """From a kubeconfig file, or the in-cluster service account when none is given."""
        creds = await load_credentials(kubeconfig, context)
        ctx = _tls(cafile=creds.ca_path, insecure=creds.insecure)
        if creds.cert_path:
            ctx.load_cert_chain(creds.cert_path, creds.key_path)
        return cls(creds.host, ctx, _bearer(creds.token or ""), creds)

    @classmethod
    def from_token(
        cls, host: str, token: str, ca_pem: bytes | None = None, insecure: bool = False
    ) -> KubeClient:
        """A bearer-token client, as Karmada reaches a member cluster (Cluster secretRef)."""
        ctx = _tls(cadata=ca_pem.decode() if ca_pem else None, insecure=insecure)
        return cls(host, ctx, _bearer(token))

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=64),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        content_type: str = "application/json",
    ) -> JSON:
        async with self.session.request(
            method,
            self.host + path,
            data=None if body is None else orjson.dumps(body),
            headers=None if body is None else {"Content-Type": content_type},
            params=params,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            data = await resp.read()
            if resp.status >= 400:
                raise _error(resp.status, data.decode(errors="replace"))
            result: JSON = orjson.loads(data) if data else {}
            return result

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON:
        return await self.request("GET", path, params=params)

    async def put(self, path: str, body: JSON) -> JSON:
        return await self.request("PUT", path, body)

    async def post(self, path: str, body: JSON) -> JSON:
        return await self.request("POST", path, body)

    async def merge_patch(self, path: str, body: JSON, timeout: float = 10.0) -> JSON:
        """PATCH with a JSON merge patch (RFC 7386), e.g. one metadata annotation."""
        return await self.request(
            "PATCH", path, body, timeout=timeout, content_type="application/merge-patch+json"
        )

    async def watch(
        self, path: str, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[str, JSON]]:
        """Yield (type, object) events; raises Gone when the version has been compacted."""
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        async with self.session.get(
            self.host + path,
            params=params,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout_seconds + 30),
        ) as resp:
            if resp.status >= 400:
                raise _error(resp.status, await resp.text())
            async for line in resp.content:
                if not line.strip():
                    continue
                event = orjson.loads(line)
                kind, obj = event.get("type", ""), event.get("object", {})
                if kind == "ERROR":
                    raise _error(int(obj.get("code", 500)), orjson.dumps(obj).decode())
                yield kind, obj
