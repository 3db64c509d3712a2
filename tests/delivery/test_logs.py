"""Structured log lines: one per event, key=value or JSON, extra fields included."""

from __future__ import annotations

import json
import logging

import pytest

from karmadaquota import logs


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_one_line_per_event_with_fields(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    logs.setup(fmt)
    logging.getLogger("karmadaquota.test").info(
        "admission decision",
        extra={"namespace": "team-a", "binding": "web", "uid": "u-1", "detail": "a b=c"},
    )
    line = capsys.readouterr().err.strip()
    assert "\n" not in line
    if fmt == "json":
        doc = json.loads(line)
        assert doc["msg"] == "admission decision"
        assert (doc["namespace"], doc["binding"], doc["uid"]) == ("team-a", "web", "u-1")
    else:
        assert 'msg="admission decision"' in line
        assert "namespace=team-a binding=web uid=u-1" in line
        assert 'detail="a b=c"' in line
