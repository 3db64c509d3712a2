"""Structured logs: one line per event, `key=value` text or JSON (`--log-format`)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()) | {"message"}


class _Formatter(logging.Formatter):
    def __init__(self, fmt: str) -> None:
        super().__init__()
        self.json = fmt == "json"

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields.update({k: v for k, v in vars(record).items() if k not in _RESERVED})
        if record.exc_info:
            fields["error"] = self.formatException(record.exc_info)
        if self.json:
            return json.dumps(fields, default=str)
        return " ".join(f"{k}={_text(v)}" for k, v in fields.items())


def _text(value: Any) -> str:
    s = str(value)
    return json.dumps(s) if (" " in s or "=" in s or '"' in s or not s) else s


def setup(fmt: str = "text", level: str = "info") -> None:
    """Configure the root logger once for a process (text or json lines on stderr)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
