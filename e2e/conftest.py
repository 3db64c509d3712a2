"""Fixtures for the e2e suites: one real test bed per session, a namespace per test.

Backend (``KARMADAQUOTA_TESTBED``):

* ``local`` (default): builds missing programs (``hack/build-binaries.sh``, a no-op when up to
  date), then starts a fresh Karmada control plane + members as local processes in a new
  temporary home per session (``$KARMADAQUOTA_E2E_HOME`` to choose one; never the ``make up``
  bed in ``$KARMADAQUOTA_HOME``, and concurrent sessions do not interfere). It is stopped at
  the end of the session, on SIGTERM, at exit, or by its reaper if pytest dies. The home is
  deleted afterwards unless a test failed (its ``logs/`` are then kept and named in the
  summary). ``KARMADAQUOTA_E2E_REUSE=1`` runs against the already running ``make up`` bed
  instead (faster iteration; it is left running).
* ``kind``: uses the kubeconfigs ``hack/kind-up.sh`` wrote to ``$KARMADAQUOTA_HOME/kubeconfig``.

Members: ``KARMADAQUOTA_E2E_MEMBERS`` (default ``member1,member2``).

For tests of our own webhook: ``testbed.serving_cert(name)`` mints a serving certificate for
``testbed.webhook_host`` (127.0.0.1 locally) and returns its caBundle;
``testbed.register_validating_webhook(name, url, ca_bundle, rules)`` points the karmada-apiserver
at it. Tests run on the event loop: use ``await testbed.akubectl(...)`` / ``aapply`` / ``aget``
and ``eventually`` (e2e.testbed.aio) so the loop is never blocked.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.testbed import (
    DEFAULT_MEMBERS,
    TestBed,
    backend_from_env,
    build_binaries,
    default_home,
)

E2E_DIR = Path(__file__).resolve().parent
_BED_SUMMARY = pytest.StashKey[str]()
_IMAGE_SUMMARY = pytest.StashKey[str]()


def e2e_home() -> tuple[Path, bool]:
    """(home, is_temporary)."""
    chosen = os.environ.get("KARMADAQUOTA_E2E_HOME")
    if chosen:
        return Path(chosen), False
    return Path(tempfile.mkdtemp(prefix="karmadaquota-e2e-")), True


def e2e_members() -> list[str]:
    env = os.environ.get("KARMADAQUOTA_E2E_MEMBERS")
    return [m for m in env.split(",") if m] if env else list(DEFAULT_MEMBERS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under e2e/ is an e2e test."""
    for item in items:
        if E2E_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    summary = config.stash.get(_BED_SUMMARY, None)
    if summary:
        terminalreporter.write_sep("-", "karmadaquota test bed")
        terminalreporter.write_line(summary)
    image = config.stash.get(_IMAGE_SUMMARY, None)
    if image:
        terminalreporter.write_line(image)


@pytest.fixture(scope="session")
def testbed(request: pytest.FixtureRequest) -> Iterator[TestBed]:
    """The session's test bed (see the module docstring for backends and variables)."""
    if backend_from_env() == "kind":
        yield TestBed.kind()
        return
    if os.environ.get("KARMADAQUOTA_E2E_REUSE"):
        bed = TestBed.attach(default_home())
        if not bed.healthy():
            pytest.fail(f"KARMADAQUOTA_E2E_REUSE: the bed in {bed.home.root} is not healthy")
        yield bed
        return
    build_binaries()
    home, temporary = e2e_home()
    bed = TestBed.start(home, e2e_members(), ephemeral=True)
    summary = f"Karmada {bed.inputs.karmada_version}, started in {bed.start_seconds}s"
    try:
        yield bed
    finally:
        summary += f"; at the end: {bed.memory_summary()}"
        bed.stop()
        if temporary and request.session.testsfailed == 0:
            shutil.rmtree(home, ignore_errors=True)
        else:
            summary += f"\nlogs: {home / 'logs'}"
        request.config.stash[_BED_SUMMARY] = summary


@pytest.fixture(scope="session")
def image(request: pytest.FixtureRequest) -> str:
    """The karmadaquota image built from this tree (hack/build-image.sh), which the install
    tests run under each rendered container's securityContext (e2e.testbed.kubelet)."""
    from e2e.testbed import kubelet

    ref = kubelet.build_image()
    request.config.stash[_IMAGE_SUMMARY] = f"pods ran from {ref} under {kubelet.engine()}"
    return ref


@pytest.fixture
def namespace(testbed: TestBed, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace on karmada-apiserver (Karmada propagates it to the members);
    deleted after the test."""
    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"e2e-{slug}-{secrets.token_hex(3)}"
    testbed.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        testbed.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")


@pytest.fixture
async def karmada_client(testbed: TestBed) -> AsyncIterator[Any]:
    """Our own KubeClient for karmada-apiserver (admin credentials), closed after the test."""
    from karmadaquota.kube.client import KubeClient

    client = await KubeClient.connect(str(testbed.karmada_kubeconfig))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture(scope="session")
async def karmada_api(testbed: TestBed) -> AsyncIterator[Any]:
    """A kubernetes_asyncio ApiClient for karmada-apiserver."""
    from kubernetes_asyncio import config

    client = await config.new_client_from_config(config_file=str(testbed.karmada_kubeconfig))
    try:
        yield client
    finally:
        await client.close()
