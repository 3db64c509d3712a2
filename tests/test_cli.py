"""The command line's own errors."""

from __future__ import annotations

import sys

import pytest

from karmadaquota import cli


def test_uvloop_event_loop_without_uvloop_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    code = cli.main(
        ["webhook", "--tls-cert-file=c", "--tls-private-key-file=k", "--event-loop=uvloop"]
    )
    assert code == 2
    assert "--event-loop=uvloop: uvloop is not installed" in capsys.readouterr().err
