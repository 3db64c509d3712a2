"""A thin async Kubernetes REST client on aiohttp, for the few calls the webhook makes.

kubernetes_asyncio loads the credentials (kubeconfig or in-cluster service account) — that is
the part worth a library. The requests themselves go through one pooled aiohttp session as
plain JSON: the quota hot path (GET, PUT status, WATCH) needs no generated models, and raw
dicts keep a status write to one serialisation. Bodies and watch events are encoded and decoded
with orjson, several times faster than the standard library on quota and binding objects (the
controller decodes every binding event; the webhook encodes every status write).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import orjson
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config import load_incluster_config, load_kube_config

from karmadaquota import __version__

JSON = dict[str, Any]
# a request body: an object, or the operations of a JSON patch (RFC 6902)
Body = JSON | list[JSON]
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # server-side apply (JSON is YAML)
USER_AGENT = f"karmadaquota/{__version__}"
# a 429 whose Retry-After is not a number of seconds waits this long
_DEFAULT_RETRY_AFTER = 1.0
# connections of a client's request pool: its requests beyond that wait (within their deadline)
POOL_LIMIT = 64
# a watch's connection and headers arrive within this, and it ends this long after the
# server's own timeoutSeconds at the latest
WATCH_CONNECT = 10.0
WATCH_SLACK = 30.0

log = logging.getLogger("karmadaquota.kube")


def user_agent(component: str) -> str:
    """`karmadaquota-<component>/<version>`: how the API server's logs and audit name us."""
    return f"karmadaquota-{component}/{__version__}"


def _retry_after(value: str | None) -> float:
    """Seconds from a Retry-After header (delta-seconds form, the API server's)."""
    try:
        return max(float(value or ""), 0.0)
    except ValueError:
        return _DEFAULT_RETRY_AFTER


class CredentialsError(Exception):
    """The kubeconfig (or service account) cannot be turned into credentials here."""


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
    """What the controller and the install command need of a client: `KubeClient`, or a fake
    in unit tests."""

    async def request(
        self,
        method: str,
        path: str,
        body: Body | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        content_type: str = "application/json",
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
    configuration = Configuration()
    if kubeconfig:
        try:
            await load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        except FileNotFoundError as e:
            if "temporary directory" not in str(e):
                raise
            # kubernetes_asyncio writes inline *-data fields to temporary files
            raise CredentialsError(
                f"kubeconfig {kubeconfig}: its inline certificate data is written to a "
                f"temporary file, and no writable temporary directory exists ({e}); "
                "mount an emptyDir at /tmp (or point TMPDIR at one)"
            ) from None
    else:
        load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    token = (
        configuration.api_key.get("authorization")
        or configuration.api_key.get("BearerToken")
        or None
    )
    scheme = None
    if token and " " in token:
        scheme, token = token.split(" ", 1)
    elif token:
        scheme = "Bearer"
    return Credentials(
        host=str(configuration.host),
        ca_path=configuration.ssl_ca_cert or None,
        insecure=not configuration.verify_ssl,
        scheme=scheme,
        token=token,
        cert_path=configuration.cert_file or None,
        key_path=configuration.key_file or None,
    )


class KubeClient:
    """JSON over HTTPS to one API server; create with `connect`, close with `close`.

    Every request names its program (`User-Agent: karmadaquota-<component>/<version>`, as
    client-go does), waits out a 429 that carries `Retry-After` (API Priority and Fairness;
    like client-go, a 429 without it — e.g. an admission webhook's "try again" — is the
    answer) up to the request's own timeout, and — for a client built from a kubeconfig or the
    service account — loads the credentials again on a 401 and retries once: a rotated
    service-account token file, a kubeconfig Secret updated in place, or an exec plugin's
    expired token.
    """

    def __init__(
        self,
        host: str,
        ssl_context: ssl.SSLContext,
        headers: Mapping[str, str],
        credentials: Credentials | None = None,
        user_agent: str = USER_AGENT,
        source: tuple[str | None, str | None] | None = None,
        pool_limit: int = POOL_LIMIT,
    ) -> None:
        self.credentials = credentials or Credentials(host)
        self.host = host.rstrip("/")
        self._ssl = ssl_context
        self._headers = {"Accept": "application/json", "User-Agent": user_agent}
        self._auth = dict(headers)
        self._source = source  # (kubeconfig, context) to load again on a 401; None: fixed
        self._pool_limit = pool_limit
        self._session: aiohttp.ClientSession | None = None
        # watches hold their connection for minutes: a pool of their own, so that they never
        # take the requests' connections (nor wait for one)
        self._watch_session: aiohttp.ClientSession | None = None
        # lanes (`lane`) share this client's credentials: the root holds them
        self._root: KubeClient = self
        self._lanes: list[KubeClient] = []

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        user_agent: str = USER_AGENT,
    ) -> KubeClient:
        """From a kubeconfig file, or the in-cluster service account when none is given."""
        creds = await load_credentials(kubeconfig, context)
        ctx = _tls(cafile=creds.ca_path, insecure=creds.insecure)
        if creds.cert_path:
            ctx.load_cert_chain(creds.cert_path, creds.key_path)
        auth = _bearer(creds.token or "")
        return cls(creds.host, ctx, auth, creds, user_agent, source=(kubeconfig, context))

    @classmethod
    def from_token(
        cls,
        host: str,
        token: str,
        ca_pem: bytes | None = None,
        insecure: bool = False,
        user_agent: str = USER_AGENT,
    ) -> KubeClient:
        """A bearer-token client, as Karmada reaches a member cluster (Cluster secretRef)."""
        ctx = _tls(cadata=ca_pem.decode() if ca_pem else None, insecure=insecure)
        return cls(host, ctx, _bearer(token), user_agent=user_agent)

    def lane(self, pool_limit: int) -> KubeClient:
        """A client with a connection pool of its own and this client's credentials: a job
        whose requests must never wait behind another job's (the leader's Lease behind 5,000
        status writes) gets one."""
        child = KubeClient(
            self.host,
            self._ssl,
            {},
            self.credentials,
            self._headers["User-Agent"],
            self._source,
            pool_limit,
        )
        child._root = self._root
        self._root._lanes.append(child)
        return child

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=self._pool_limit),
            )
        return self._session

    @property
    def watch_session(self) -> aiohttp.ClientSession:
        if self._watch_session is None or self._watch_session.closed:
            self._watch_session = aiohttp.ClientSession(
                headers=self._headers, connector=aiohttp.TCPConnector(ssl=self._ssl, limit=0)
            )
        return self._watch_session

    async def close(self) -> None:
        for lane in self._lanes:
            await lane.close()
        for session in (self._session, self._watch_session):
            if session is not None:
                await session.close()

    async def refresh_credentials(self) -> bool:
        """Load the credentials again from where they came from; True when the token changed.

        Only the bearer token is replaced: a client certificate is part of the TLS context of
        open connections (rotate it by restarting the process)."""
        root = self._root
        if root is not self:
            return await root.refresh_credentials()
        if self._source is None:
            return False
        creds = await load_credentials(*self._source)
        auth = _bearer(creds.token or "")
        if auth == self._auth:
            return False
        log.info("credentials reloaded after 401 Unauthorized", extra={"host": self.host})
        self._auth, self.credentials = auth, creds
        return True

    async def request(
        self,
        method: str,
        path: str,
        body: Body | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        content_type: str = "application/json",
    ) -> JSON:
        data = None if body is None else orjson.dumps(body)
        deadline = time.monotonic() + timeout
        refreshed = False
        while True:
            headers = dict(self._root._auth)
            if data is not None:
                headers["Content-Type"] = content_type
            async with self.session.request(
                method,
                self.host + path,
                data=data,
                headers=headers,
                params=params,
                timeout=aiohttp.ClientTimeout(total=max(deadline - time.monotonic(), 0.001)),
            ) as resp:
                raw = await resp.read()
                status, retry_after = resp.status, resp.headers.get("Retry-After")
            if status == 401 and not refreshed:
                refreshed = True
                if await self.refresh_credentials():
                    continue
            if status == 429 and retry_after is not None:
                wait = _retry_after(retry_after)
                if time.monotonic() + wait < deadline:
                    await asyncio.sleep(wait)
                    continue
            if status >= 400:
                raise _error(status, raw.decode(errors="replace"))
            result: JSON = orjson.loads(raw) if raw else {}
            return result

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON:
        return await self.request("GET", path, params=params)

    async def put(self, path: str, body: JSON) -> JSON:
        return await self.request("PUT", path, body)

    async def post(self, path: str, body: JSON) -> JSON:
        return await self.request("POST", path, body)

    async def merge_patch(self, path: str, body: JSON, timeout: float = 10.0) -> JSON:
        """PATCH with a JSON merge patch (RFC 7386), e.g. one metadata annotation."""
        return await self.request("PATCH", path, body, timeout=timeout, content_type=MERGE_PATCH)

    async def watch(
        self, path: str, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[str, JSON]]:
        """Yield (type, object) events; raises Gone when the version has been compacted.

        From the watch pool, with a deadline: connected within WATCH_CONNECT, over
        WATCH_SLACK after the server's `timeoutSeconds` (a watch the server never ends, or a
        half-open connection, is given up and resumed by its informer)."""
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        async with self.watch_session.get(
            self.host + path,
            params=params,
            headers=self._root._auth,
            timeout=aiohttp.ClientTimeout(
                total=timeout_seconds + WATCH_SLACK,
                connect=WATCH_CONNECT,
                sock_read=timeout_seconds + WATCH_SLACK,
            ),
        ) as resp:
            if resp.status >= 400:
                raise _error(resp.status, await resp.text())
            lines = aiter(resp.content)
            while True:
                try:
                    line = await anext(lines)
                except (StopAsyncIteration, TimeoutError):
                    return  # ended, or past its deadline: resumed from the last version seen
                if not line.strip():
                    continue
                event = orjson.loads(line)
                kind, obj = event.get("type", ""), event.get("object", {})
                if kind == "ERROR":
                    raise _error(int(obj.get("code", 500)), orjson.dumps(obj).decode())
                yield kind, obj
