"""A minimal synchronous Kubernetes REST client for bootstrapping and readiness probes.

The test bed applies its own bootstrap objects (namespaces, CRDs, webhook configurations,
Clusters, Nodes ...) with server-side apply straight over HTTPS: no kubectl process start and
no discovery round trips on the start path. Tests use kubectl or kubernetes_asyncio instead.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .pki import CertFiles

FIELD_MANAGER = "karmadaquota-testbed"

# kind -> (plural, namespaced) for the kinds the test bed itself applies.
KINDS: dict[str, tuple[str, bool]] = {
    "Namespace": ("namespaces", False),
    "Node": ("nodes", False),
    "Secret": ("secrets", True),
    "Service": ("services", True),
    "ConfigMap": ("configmaps", True),
    "ServiceAccount": ("serviceaccounts", True),
    "PriorityClass": ("priorityclasses", False),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "APIService": ("apiservices", False),
    "MutatingWebhookConfiguration": ("mutatingwebhookconfigurations", False),
    "ValidatingWebhookConfiguration": ("validatingwebhookconfigurations", False),
    "Cluster": ("clusters", False),
}


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: bytes) -> None:
        self.status = status
        self.body = body
        try:
            message = json.loads(body).get("message", "")
        except (ValueError, AttributeError):
            message = body[:500].decode("utf-8", "replace")
        super().__init__(f"{method} {path}: HTTP {status}: {message}")


def object_path(obj: Mapping[str, Any], with_name: bool = True) -> str:
    api_version = str(obj["apiVersion"])
    kind = str(obj["kind"])
    if kind not in KINDS:
        raise KeyError(f"rest.object_path: unknown kind {kind!r}; add it to rest.KINDS")
    plural, namespaced = KINDS[kind]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    meta = obj.get("metadata", {})
    if namespaced:
        base += f"/namespaces/{meta.get('namespace', 'default')}"
    base += f"/{plural}"
    return f"{base}/{meta['name']}" if with_name else base


class RestClient:
    def __init__(
        self,
        server: str,
        *,
        ca_file: Path | None = None,
        client: CertFiles | None = None,
        token: str | None = None,
        insecure: bool = False,
        timeout: float = 10.0,
    ) -> None:
        url = urllib.parse.urlsplit(server)
        if url.scheme not in ("https", "http"):
            raise ValueError(f"unsupported server URL {server!r}")
        self.server = server
        self._scheme = url.scheme
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._token = token
        self._timeout = timeout
        self._ctx: ssl.SSLContext | None = None
        if url.scheme == "https":
            if insecure:
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            else:
                ctx = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
            if client is not None:
                ctx.load_cert_chain(str(client.cert), str(client.key))
            self._ctx = ctx

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> tuple[int, bytes]:
        conn: http.client.HTTPConnection
        if self._ctx is not None:
            conn = http.client.HTTPSConnection(
                self._host, self._port, context=self._ctx, timeout=timeout or self._timeout
            )
        else:
            conn = http.client.HTTPConnection(
                self._host, self._port, timeout=timeout or self._timeout
            )
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def ok(self, path: str) -> bool:
        """True when GET ``path`` answers 200 (connection errors count as False)."""
        try:
            status, _ = self.request("GET", path, timeout=3)
        except OSError:
            return False
        return status == 200

    def get(self, path: str) -> dict[str, Any] | None:
        status, body = self.request("GET", path)
        if status == 404:
            return None
        if status >= 300:
            raise ApiError("GET", path, status, body)
        result: dict[str, Any] = json.loads(body)
        return result

    def apply(self, obj: Mapping[str, Any], force: bool = True) -> dict[str, Any]:
        """Server-side apply ``obj`` (kind must be in `KINDS`)."""
        path = object_path(obj)
        query = f"?fieldManager={FIELD_MANAGER}" + ("&force=true" if force else "")
        status, body = self.request(
            "PATCH", path + query, obj, content_type="application/apply-patch+yaml"
        )
        if status >= 300:
            raise ApiError("PATCH", path, status, body)
        result: dict[str, Any] = json.loads(body)
        return result

    def delete(self, path: str) -> None:
        status, body = self.request("DELETE", path)
        if status >= 300 and status != 404:
            raise ApiError("DELETE", path, status, body)


def condition(obj: Mapping[str, Any] | None, type_: str) -> str | None:
    """The status of condition ``type_`` of ``obj`` ("True"/"False"/...), or None."""
    if not obj:
        return None
    for c in obj.get("status", {}).get("conditions", []) or []:
        if c.get("type") == type_:
            return str(c.get("status"))
    return None
