"""kopf's side of the controller: it logs in with what `kube/` loaded, never on its own."""

from __future__ import annotations

from pathlib import Path

from karmadaquota.controller.operator import login_with, settings
from karmadaquota.kube.client import KubeClient
from karmadaquota.kube.informer import RECONNECT
from tests.kube.test_kube_client import kubeconfig


async def test_kopf_logs_in_with_the_clients_credentials_reloaded(tmp_path: Path) -> None:
    """One credential path: kopf's login handler returns the server and token the controller's
    own client loaded from its kubeconfig — and, after the kubeconfig changed (a rotated
    token in an updated Secret), the new token, which the client itself now uses too."""
    path = tmp_path / "kubeconfig"
    client = await KubeClient.connect(kubeconfig(path, "https://127.0.0.1:6443", "old"))
    try:
        first = await login_with(client)
        assert (first.server, first.token, first.scheme) == (
            "https://127.0.0.1:6443",
            "old",
            "Bearer",
        )
        kubeconfig(path, "https://127.0.0.1:6443", "new")
        again = await login_with(client)
        assert again.token == "new" and client.credentials.token == "new"
        assert again.server == client.credentials.host
    finally:
        await client.close()


def test_kopf_retries_on_the_informers_backoff() -> None:
    s = settings()
    assert tuple(s.networking.error_backoffs) == (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
    assert tuple(s.networking.error_backoffs) == RECONNECT.ceilings()
    assert s.watching.reconnect_backoff == RECONNECT.base
