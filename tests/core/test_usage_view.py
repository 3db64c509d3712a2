"""Describe's usage bars and `--output json|yaml`: numbers from the quota object, drawn to fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from karmadaquota import kubectl_plugin
from karmadaquota.usage_view import bars, summarize
from tests.conftest import NOW
from tests.delivery.test_kubectl_plugin import FULL, kq


def test_summary_counts_every_pending_charge_and_never_guesses_usage() -> None:
    s = summarize(FULL)
    by = {r["name"]: r for r in s["resources"]}
    # the reservation expiring in 42 s counts, and so does the expired one (pods=1): only the
    # controller releases a charge, never a clock
    assert by["pods"] == {
        "name": "pods",
        "hard": "500",
        "used": "30",
        "reserved": "5",
        "free": "465",
        "percent": 7.0,
        "clusters": [
            {"name": "member1", "used": "20", "observed": "20"},
            {"name": "member2", "used": "10", "observed": "11"},
        ],
    }
    assert by["requests.cpu"]["free"] == "86" and by["requests.cpu"]["percent"] == 14.0
    fresh = {r["name"]: r for r in summarize(kq())["resources"]}
    assert fresh["pods"]["used"] is None and fresh["pods"]["free"] is None
    assert fresh["pods"]["percent"] is None


def test_bars_draw_used_and_reserved_against_hard_per_resource_and_member() -> None:
    lines = bars(summarize(FULL))
    assert lines[0].startswith("Usage (# used, + reserved")
    cpu = next(line for line in lines if line.strip().startswith("requests.cpu"))
    bar = cpu[cpu.index("[") + 1 : cpu.index("]")]
    # 12 used + 2 reserved of 100: 12 % of the cells are '#', 2 % are '+'
    assert bar.count("#") == round(0.12 * len(bar))
    assert bar.count("+") == round(0.02 * len(bar))
    assert bar.count(".") == len(bar) - bar.count("#") - bar.count("+")
    assert cpu.endswith("12+2/100 14%")
    members = lines[lines.index(cpu) + 1 : lines.index(cpu) + 3]
    assert [m.split()[0] for m in members] == ["member1", "member2"]
    assert members[1].endswith("4 (observed 5)")
    assert all(len(line) <= 100 for line in lines)


def test_an_over_full_quota_is_marked_and_unknown_usage_is_not_zero() -> None:
    over = kq(used={"requests.cpu": "150", "pods": "0", "count/deployments.apps": "10"})
    lines = {line.split()[0]: line for line in bars(summarize(over))[1:]}
    assert "!" in lines["requests.cpu"] and "150/100 150%" in lines["requests.cpu"]
    assert "]" in lines["count/deployments.apps"]  # exactly full is not over
    unknown = {line.split()[0]: line for line in bars(summarize(kq()))[1:]}
    assert unknown["pods"].endswith("?/500 ?%")


def test_bars_fit_100_columns_with_long_names_and_many_members() -> None:
    q = kq(
        used={"requests.example.com/a-very-long-extended-resource-name": "1"},
        aggregatedStatus=[
            {"clusterName": f"cluster-with-a-long-name-{i}", "used": {"pods": "123456789"}}
            for i in range(5)
        ],
    )
    q["spec"]["hard"]["requests.example.com/a-very-long-extended-resource-name"] = "1000000000"
    lines = bars(summarize(q))
    assert max(len(line) for line in lines) <= 100
    assert any("~" in line for line in lines)  # long names are shortened, visibly


def test_render_includes_the_bars() -> None:
    out = kubectl_plugin.render(FULL, NOW)
    assert "Usage (# used" in out
    assert out.index("Usage (# used") < out.index("Reservations:")


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_describe_output_for_scripts(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "kubectl"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(FULL)}\nEOF\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KUBECTL", str(fake))
    assert kubectl_plugin.main(["describe", "team", "-n", "team-a", "-o", fmt]) == 0
    out = capsys.readouterr().out
    data = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    assert (data["name"], data["namespace"]) == ("team", "team-a")
    assert data["scopes"] == ["PriorityClass In [high]"]
    assert [r["name"] for r in data["resources"]] == [
        "count/deployments.apps",
        "pods",
        "requests.cpu",
    ]
    # main reads the real clock: both of FULL's reservations (around 2026-01-01) have expired
    assert [(r["binding"], r["expired"]) for r in data["reservations"]] == [
        ("web-deployment", True),
        ("old", True),
    ]
    live = kubectl_plugin.describe_data(FULL, NOW)["reservations"]
    assert [r["expired"] for r in live] == [False, True]
    assert data["conditions"][1]["reason"] == "MemberUnreachable"
