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


def test_requeue_flags_reach_the_controller_config() -> None:
    from karmadaquota.controller.main import config_from

    parse = cli._parser().parse_args
    on = config_from(parse(["controller", "--requeue-kind", "batch/Job"]), {})
    assert on.requeue is not None
    assert [(k.group, k.kind, k.resource) for k in on.requeue.kinds] == [
        ("apps", "Deployment", "deployments"),
        ("apps", "StatefulSet", "statefulsets"),
        ("batch", "Job", "jobs"),
    ]
    assert config_from(parse(["controller", "--no-requeue"]), {}).requeue is None


def test_admission_window_reaches_the_controller_config() -> None:
    from karmadaquota.controller.main import config_from
    from karmadaquota.controller.reconciler import DEFAULT_ADMISSION_WINDOW

    parse = cli._parser().parse_args
    assert config_from(parse(["controller"]), {}).admission_window == DEFAULT_ADMISSION_WINDOW
    assert config_from(parse(["controller", "--admission-window=40s"]), {}).admission_window == 40


def test_a_malformed_requeue_kind_is_refused_when_parsing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["controller", "--requeue-kind", "Deployment"])
    assert "invalid kind 'Deployment': use <group>/<Kind>" in capsys.readouterr().err
