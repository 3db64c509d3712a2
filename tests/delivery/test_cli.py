"""The command line's own errors."""

from __future__ import annotations

import argparse
import json
import logging
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


def test_wake_flags_reach_the_controller_config() -> None:
    from karmadaquota.controller.main import config_from

    parse = cli._parser().parse_args
    on = config_from(parse(["controller", "--wake-kind", "batch/Job"]), {})
    assert on.wake is not None
    assert [(k.group, k.kind, k.resource) for k in on.wake.kinds] == [
        ("apps", "Deployment", "deployments"),
        ("apps", "StatefulSet", "statefulsets"),
        ("batch", "Job", "jobs"),
    ]
    assert config_from(parse(["controller", "--no-wake"]), {}).wake is None
    default = config_from(parse(["controller"]), {}).wake
    assert default is not None and [k.kind for k in default.kinds] == ["Deployment", "StatefulSet"]


def test_deprecated_requeue_flags_still_work_as_the_wake_flags() -> None:
    from karmadaquota.controller.main import config_from

    parse = cli._parser().parse_args
    old = parse(["controller", "--requeue-kind", "batch/Job", "--wake-kind", "/Pod"])
    new = parse(["controller", "--wake-kind", "batch/Job", "--wake-kind", "/Pod"])
    assert old.wake_kind == new.wake_kind == ["batch/Job", "/Pod"]
    assert config_from(old, {}) == config_from(new, {})
    assert config_from(parse(["controller", "--no-requeue"]), {}).wake is None
    assert not parse(["controller"]).no_wake


def test_deprecated_requeue_flags_are_hidden_from_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["controller", "--help"])
    out = capsys.readouterr().out
    assert "--no-wake" in out and "--wake-kind" in out
    assert "requeue" not in out


def test_deprecated_requeue_flags_log_one_warning_each_at_start_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    args = cli._parser().parse_args(
        ["controller", "--no-requeue", "--requeue-kind=batch/Job", "--requeue-kind=/Pod"]
    )
    with caplog.at_level(logging.WARNING, logger="karmadaquota.cli"):
        cli.warn_deprecated(args)
    warned = [(r.getMessage(), r.flag, r.use) for r in caplog.records]  # type: ignore[attr-defined]
    assert warned == [
        ("deprecated flag", "--no-requeue", "--no-wake"),
        ("deprecated flag", "--requeue-kind", "--wake-kind"),
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="karmadaquota.cli"):
        cli.warn_deprecated(cli._parser().parse_args(["controller", "--no-wake"]))
    assert caplog.records == []


def test_main_warns_about_a_deprecated_flag_before_running(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from karmadaquota.controller import main as controller_main

    ran: list[bool] = []

    def run_controller(args: argparse.Namespace) -> int:
        ran.append(args.no_wake)
        return 0

    monkeypatch.setattr(controller_main, "run_controller", run_controller)
    assert cli.main(["--log-format=json", "controller", "--no-requeue"]) == 0
    assert ran == [True]
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(d["level"], d["msg"], d["flag"], d["use"]) for d in lines] == [
        ("warning", "deprecated flag", "--no-requeue", "--no-wake")
    ]


def test_admission_window_reaches_the_controller_config() -> None:
    from karmadaquota.controller.main import config_from
    from karmadaquota.controller.reconciler import DEFAULT_ADMISSION_WINDOW

    parse = cli._parser().parse_args
    assert (
        config_from(parse(["controller"]), {}).reconciler.admission_window
        == DEFAULT_ADMISSION_WINDOW
    )
    assert (
        config_from(parse(["controller", "--admission-window=40s"]), {}).reconciler.admission_window
        == 40
    )


@pytest.mark.parametrize("flag", ["--wake-kind", "--requeue-kind"])
def test_a_malformed_wake_kind_is_refused_when_parsing(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["controller", flag, "Deployment"])
    assert "invalid kind 'Deployment': use <group>/<Kind>" in capsys.readouterr().err


def _flags(parser: argparse.ArgumentParser, command: str = "") -> list[tuple[str, str]]:
    """Every visible long flag, with the command it belongs to (sub-commands included)."""
    out: list[tuple[str, str]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _flags(sub, f"{command} {name}".strip())
        elif action.help != argparse.SUPPRESS:
            out += [(command, o) for o in action.option_strings if o.startswith("--")]
    return [(c, f) for c, f in out if f != "--help"]


def test_every_visible_flag_is_in_the_configuration_reference() -> None:
    """docs/install.md's configuration reference names every flag `--help` shows (five webhook
    flags were missing from it)."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "install.md").read_text()
    reference = doc.split("## Configuration reference", 1)[1].split("\n## ", 1)[0]
    flags = _flags(cli._parser())
    assert ("webhook", "--event-loop") in flags  # the walk reaches the sub-commands
    missing = [f"{c} {f}" for c, f in flags if f"`{f}`" not in reference]
    assert missing == []


def test_recompute_concurrency_reaches_the_recompute_queues() -> None:
    from karmadaquota.controller.main import config_from

    parse = cli._parser().parse_args
    assert config_from(parse(["controller"]), {}).reconciler.concurrency == 48
    config = config_from(parse(["controller", "--recompute-concurrency=16"]), {})
    assert config.reconciler.concurrency == 16
