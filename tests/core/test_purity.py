"""The decision core is pure: importing it loads no Kubernetes client, no aiohttp, no kopf."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

FORBIDDEN = ("aiohttp", "kubernetes_asyncio", "kopf", "kubernetes")
CORE = (
    "karmadaquota",
    "karmadaquota.quantity",
    "karmadaquota.resources",
    "karmadaquota.scopes",
    "karmadaquota.charge",
    "karmadaquota.evaluate",
    "karmadaquota.validation",
    "karmadaquota.api",
    "karmadaquota.pending",
    "karmadaquota.times",
    "karmadaquota.crdgen",
)


def imported_after(modules: tuple[str, ...]) -> list[str]:
    """Top-level packages in sys.modules after importing `modules` in a fresh interpreter."""
    code = (
        "import importlib, json, sys\n"
        f"for m in {list(modules)!r}:\n"
        "    importlib.import_module(m)\n"
        "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def test_core_imports_no_io_library() -> None:
    loaded = imported_after(
        ("karmadaquota", "karmadaquota.evaluate", "karmadaquota.charge", "karmadaquota.validation")
    )
    assert "karmadaquota" in loaded
    assert [m for m in FORBIDDEN if m in loaded] == []


@pytest.mark.parametrize("module", CORE)
def test_each_core_module_imports_no_io_library(module: str) -> None:
    loaded = imported_after((module,))
    assert [m for m in FORBIDDEN if m in loaded] == []


def test_the_check_can_fail() -> None:
    """Guard against a vacuous test: an I/O library does show up when imported."""
    pytest.importorskip("aiohttp")
    assert "aiohttp" in imported_after(("aiohttp",))
